// The GPU suite's rig: a compiler and a CUDA tester as the services run them, and the switch that skips
// every GPU test unless KILN_GPU_TESTS=1. Test-only.
#pragma once

#include <prometheus/registry.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/compiler/handler.h"
#include "kiln/core/files.h"
#include "kiln/task/task.h"
#include "kiln/tester/handler.h"
#include "kiln/testing/skip.h"
#include "kiln/testing/test_status.h"

namespace kiln::gpu_test {

inline bool gpu_tests_enabled() {
  const char* v = std::getenv("KILN_GPU_TESTS");
  return v && std::string(v) == "1";
}

// Skips the test case (ctest reports it skipped) unless KILN_GPU_TESTS=1.
#define KILN_REQUIRE_GPU_TESTS()                                          \
  do {                                                                    \
    if (!::kiln::gpu_test::gpu_tests_enabled()) {                         \
      ::kiln::testing::skip_test("KILN_GPU_TESTS is not 1 (no GPU run)"); \
    }                                                                     \
  } while (0)

// A bundled task by name ("cuda_softmax"), or by its path under configs/ ("kernelbench/kb_softmax_cuda").
inline kiln::proto::FileMap task_files(const std::string& name) {
  const std::string under = name.find('/') == std::string::npos ? "/configs/tasks/" : "/configs/";
  auto files = kiln::task::load_package(std::string(KILN_SOURCE_DIR) + under + name);
  REQUIRE(files.is_ok());
  return *files;
}

// A compiler and a CUDA tester, as the services run them.
struct Rig {
  kiln::TempDir cache{"kiln-gpu-test"};
  std::unique_ptr<kiln::compiler::CompileHandler> compiler;
  std::unique_ptr<kiln::tester::TestHandler> tester;

  explicit Rig(double timeout_s = 120, double min_time_s = 0.2, std::optional<bool> readonly_root = {},
               std::optional<bool> deny_process_creation = {}, const std::string& profile = "off",
               const std::string& ncu = kiln::tester::TesterOptions{}.ncu,
               const std::vector<std::string>& hidden_paths = {}, bool confine = true, int64_t slots = 1) {
    kiln::compiler::CompilerOptions c;
    c.cache_dir = cache.path() + "/cache";
    auto ch = kiln::compiler::CompileHandler::create(c, std::make_shared<prometheus::Registry>());
    REQUIRE(ch.is_ok());
    compiler = std::move(ch).value();
    kiln::tester::TesterOptions t;
    t.backend = kiln::proto::Backend::kCuda;
    t.eval_binary = KILN_BINARY_DIR "/bin/kiln-eval-cuda";
    t.timeout_s = timeout_s;
    t.timing.min_time_s = min_time_s;
    t.timing.max_time_s = 5;
    // Every task here runs under one campaign id: screening by that campaign's best would measure one
    // task's candidates against another task's speedups.
    t.screen_by_best = false;
    t.worker_id = "gpu-test";
    t.readonly_root = readonly_root;
    t.deny_process_creation = deny_process_creation;
    t.profile = profile;  // the profiling run costs seconds; only the profiling test asks for it
    t.ncu = ncu;
    // Confined as a deployed tester confines (confinement.h); `confine` false: the sandbox's older
    // defences only, to compare against.
    t.hidden_paths = hidden_paths;
    t.confine = confine;
    t.slots = slots;
    // The Python with torch for PyTorch references and baselines (default: the tester's own search).
    if (const char* python = std::getenv("KILN_TEST_PYTHON")) t.python_config = python;
    if (slots > 1) t.lock_dir = cache.path() + "/locks";
    auto th = kiln::tester::TestHandler::create(t);
    INFO(th.status().message());
    REQUIRE(th.is_ok());
    tester = std::move(th).value();
  }

  // Builds `code` (program 0 when empty) against the task's reference and evaluates it. A kernel written
  // from scratch may change the whole file only in a package whose kernel is one editable region: the
  // rig makes it so, and sends the code as that region's body.
  kiln::proto::TestReport evaluate(const std::string& task, const std::string& code = {},
                                   const std::map<std::string, std::string>& params = {}) {
    auto report = try_evaluate(task, code, params);
    INFO(report.status().message());
    REQUIRE(report.is_ok());
    return std::move(report).value();
  }

  // The tester's answer as it is: a report, or the error that makes the job a retry.
  kiln::Result<kiln::proto::TestReport> try_evaluate(const std::string& task, const std::string& code = {},
                                                     const std::map<std::string, std::string>& params = {}) {
    return tester->evaluate(build(task, code, params));
  }

  // The test job the compiler makes of `code` (program 0 when empty), built.
  kiln::proto::TestRequest build(const std::string& task, const std::string& code = {},
                                 const std::map<std::string, std::string>& params = {}) {
    kiln::proto::FileMap files = task_files(task);
    kiln::proto::CompileRequest req;
    req.cand.campaign_id = "gpu-test";
    req.cand.program_id = task + "/p" + std::to_string(++programs_);
    if (code.empty()) {
      req.cand.code = files.at("kernel.cu").data;
    } else {
      files["kernel.cu"].data = "// [EVOLVE_START]\n// [EVOLVE_END]\n";
      req.cand.regions = {code};
    }
    req.cand.params = params;
    req.backend = kiln::proto::Backend::kCuda;
    req.arch = "sm_90";
    req.files = files;
    auto out = compiler->compile(req);
    REQUIRE(out.next.size() == 1);
    if (out.next[0].service != "test.cuda") {
      auto failed = kiln::proto::decode<kiln::proto::ScoreResult>(out.next[0].payload.data);
      FAIL("build failed: " << (failed.is_ok() ? failed->error : std::string("?")));
    }
    auto test = kiln::proto::decode<kiln::proto::TestRequest>(out.next[0].payload.data);
    REQUIRE(test.is_ok());
    return std::move(test).value();
  }

  int programs_ = 0;
};

inline std::string summary(const kiln::proto::TestReport& r) {
  return kiln::testing::status_word(r.status) + ": " + r.message + "\n--- log ---\n" + r.log;
}

// A reduce_sum candidate whose body is `body` (a kernel and a kiln_entry using it).
inline std::string reduce_candidate(const std::string& body) { return "#include \"kiln/kernel_abi.h\"\n" + body; }

}  // namespace kiln::gpu_test
