// A test that cannot run here says why and ends the test process with kSkipExitCode, which ctest reports as
// skipped (kiln_test sets SKIP_RETURN_CODE on every discovered test), never as passed. ctest runs one test
// case per process, so ending the process ends only that test. Run by hand with several test cases, a skip
// ends the run there: the cases after it do not run (run them one at a time, or leave out the skipped one).
// Test-only.
#pragma once

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>

namespace kiln::testing {

inline constexpr int kSkipExitCode = 77;

// Prints "KILN-SKIP <test case>: <reason>" on stdout (the line tests/tools/ctest_summary.py reports) and exits
// with kSkipExitCode without running destructors or Catch2's own report.
[[noreturn]] inline void skip_test(const std::string& reason) {
  std::string name = "?";
  if (auto* capture = Catch::getCurrentContext().getResultCapture()) name = capture->getCurrentTestName();
  // On the process's stdout, not std::cout: Catch2's XML reporter (tests/catch_main.cc) captures std::cout
  // into its report, which a skip never finishes writing.
  std::fprintf(stdout, "KILN-SKIP %s: %s\n", name.c_str(), reason.c_str());
  std::cerr.flush();
  std::fflush(nullptr);
  std::quick_exit(kSkipExitCode);
}

}  // namespace kiln::testing

// Skips the running test case: KILN_SKIP("no nvcc at " << path).
#define KILN_SKIP(reason_stream)                         \
  do {                                                   \
    std::ostringstream kiln_skip_reason_;                \
    kiln_skip_reason_ << reason_stream;                  \
    ::kiln::testing::skip_test(kiln_skip_reason_.str()); \
  } while (0)
