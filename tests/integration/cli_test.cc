// The `kiln` command as a user meets it: broken packages are refused with one clear line, `task new`
// scaffolds a package that validates, and commands without a broker fail cleanly.
#include <catch2/catch.hpp>

#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "kiln/core/files.h"
#include "process.h"

using namespace kiln;
using namespace kiln::testing;

namespace {
ProcessResult kiln_cmd(std::vector<std::string> args, double timeout_s = 60) {
  std::vector<std::string> argv{bin_dir() + "/kiln"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, timeout_s);
}

size_t lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}
}  // namespace

TEST_CASE("broken packages are refused by validate and submit with one line naming file and key",
          "[integration][cli]") {
  struct Case {
    const char* dir;
    const char* expect;
  } cases[] = {
      {"broken_missing_file", "reference.cpp: missing"},        {"broken_bad_yaml", "task.yaml: line"},
      {"broken_unknown_key", "task.yaml: warmup: unknown key"}, {"broken_no_evolve", "kernel.cpp: no [EVOLVE_START]"},
      {"broken_undefined_dim", "dim N is not defined"},
  };
  for (const auto& c : cases) {
    std::string dir = source_dir() + "/tests/data/tasks/" + c.dir;
    for (auto args : {std::vector<std::string>{"task", "validate", dir},
                      std::vector<std::string>{"--broker", "tcp://127.0.0.1:1", "submit", dir, "--budget", "1"}}) {
      auto r = kiln_cmd(args);
      INFO(c.dir << " " << args[0] << ": " << r.err);
      CHECK(r.exit_code != 0);
      CHECK(lines(r.err) == 1);
      CHECK(r.err.find(c.expect) != std::string::npos);
    }
  }
}

TEST_CASE("task new scaffolds a package that validates", "[integration][cli]") {
  TempDir dir("kiln-cli");
  auto made = kiln_cmd({"task", "new", "my_scale", "--dir", dir.path()});
  REQUIRE(made.exit_code == 0);
  auto v = kiln_cmd({"--json", "task", "validate", dir.path() + "/my_scale"});
  INFO(v.err);
  REQUIRE(v.exit_code == 0);
  auto j = nlohmann::json::parse(v.out);
  CHECK(j["valid"] == true);
  CHECK(j["param_space"] == 6);
  CHECK(kiln_cmd({"task", "new", "Bad-Name", "--dir", dir.path()}).exit_code != 0);
}

TEST_CASE("the bundled tasks validate", "[integration][cli]") {
  for (const char* t : {"rmsnorm", "softmax", "sgemm"}) {
    auto r = kiln_cmd({"task", "validate", source_dir() + "/configs/tasks/" + t});
    INFO(t << ": " << r.err);
    CHECK(r.exit_code == 0);
  }
}

TEST_CASE("commands that need a broker fail with one line when there is none", "[integration][cli]") {
  auto r = kiln_cmd({"--broker", "tcp://127.0.0.1:1", "status"}, 30);
  CHECK(r.exit_code != 0);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("broker") != std::string::npos);
  auto h = kiln_cmd({"submit", "--help"});
  CHECK(h.exit_code == 0);
  CHECK(h.out.find("--wait") != std::string::npos);
}

TEST_CASE("the evaluation child refuses a precision of 1 or more or not a number before loading anything",
          "[integration][cli]") {
  for (const char* bad : {"1", "1.5", "-0.01", "nan"}) {
    auto r = run_process({bin_dir() + "/kiln-eval", "--task", "no-such-dir", "--kernel", "k.so", "--reference", "r.so",
                          "--out", "out.msgpack", "--precision", bad},
                         30);
    INFO(bad << ": " << r.err);
    CHECK(r.exit_code == 2);
    // Out of range, or not a non-negative number at all (the flag parser's own line).
    CHECK(r.err.find("kiln-eval: --precision: expected ") != std::string::npos);
  }
  auto r = run_process({bin_dir() + "/kiln-eval", "--task", "t", "--kernel", "k.so", "--reference", "r.so", "--out",
                        "o.msgpack", "--precision", "1"},
                       30);
  CHECK(r.err.find("--precision: expected 0 <= P < 1 (0: off), got 1.000000") != std::string::npos);
}

TEST_CASE("the evaluation child refuses a negative settle count before loading anything", "[integration][cli]") {
  auto r = run_process({bin_dir() + "/kiln-eval", "--task", "t", "--kernel", "k.so", "--reference", "r.so", "--out",
                        "o.msgpack", "--settle-calls", "-1"},
                       30);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("kiln-eval: --settle-calls: expected a number, got -1") != std::string::npos);
}

// A test's services bind the ports it picked only a moment later: until then no connection on this host
// may be able to take one (the kernel hands out its ephemeral range for those), nor may two picks agree.
TEST_CASE("the ports a test picks are outside the ephemeral range and never the same twice", "[integration][cli]") {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 32768, high = 60999;
  range >> low >> high;
  std::set<int> seen;
  for (int i = 0; i < 50; ++i) {
    const int port = kiln::testing::free_tcp_port();
    CHECK(port >= 1024);
    if (low > 11000) CHECK(port < low);
    CHECK(seen.insert(port).second);
  }
}
