// The `kiln` command as a user meets it: broken packages are refused with one clear line, `task new`
// scaffolds a package that validates, and commands without a broker fail cleanly.
#include <catch2/catch.hpp>

#include <filesystem>
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

TEST_CASE("the tuner refuses a task whose editable region is empty, an LLM campaign does not", "[integration][cli]") {
  TempDir dir("kiln-cli");
  const std::string from = source_dir() + "/tests/data/tasks/torch_cpu/";
  const std::string to = dir.path() + "/empty_region/";
  std::filesystem::create_directories(to);
  for (const char* f : {"task.yaml", "reference.py"}) std::filesystem::copy_file(from + f, to + f);
  std::ofstream(to + "kernel.cpp") << "#include <kiln/kernel_abi.h>\n// [EVOLVE_START]\n\n// [EVOLVE_END]\n";
  auto tuner = kiln_cmd({"--broker", "tcp://127.0.0.1:1", "submit", to, "--budget", "1"});
  INFO(tuner.err);
  CHECK(tuner.exit_code != 0);
  CHECK(lines(tuner.err) == 1);
  CHECK(tuner.err.find("kernel.cpp: the editable region is empty") != std::string::npos);
  // With a proposer that writes code the package is fine: the submit gets as far as the (missing) broker.
  auto llm = kiln_cmd({"--broker", "tcp://127.0.0.1:1", "submit", to, "--budget", "1", "--proposer", "llm"}, 30);
  CHECK(llm.exit_code != 0);
  CHECK(llm.err.find("editable region") == std::string::npos);
  CHECK(llm.err.find("broker") != std::string::npos);
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

// Each command with arguments a user gets wrong: refused with one line that starts "kiln: ", never a crash
// or an uncaught exception (an abort exits 134), and nothing created on the way.
TEST_CASE("every command refuses malformed arguments with one line", "[integration][cli]") {
  TempDir dir("kiln-cli-bad");
  const std::string task = source_dir() + "/tests/data/tasks/fast_cpu";
  const std::string nowhere = "tcp://127.0.0.1:1";  // nothing listens: commands that reach it time out
  struct Case {
    std::vector<std::string> args;
    const char* expect;
  } cases[] = {
      {{"--broker", "notanendpoint", "status"}, "--broker: expected tcp://HOST:PORT"},
      {{"--broker", "tcp://127.0.0.1:99999", "best", "x"}, "--broker: expected tcp://HOST:PORT"},
      {{"--broker", "notanendpoint", "submit", task}, "--broker: expected tcp://HOST:PORT"},
      {{"--config", dir.path() + "/none.yaml", "status"}, "none.yaml"},
      {{"frobnicate"}, "frobnicate"},
      {{}, "subcommand"},
      {{"submit"}, "dir is required"},
      {{"submit", task, "--budget", "-1"}, "--budget: expected a number >= 0, got -1"},
      {{"submit", task, "--budget", "many"}, "--budget"},
      {{"submit", task, "--max-in-flight", "0"}, "--max-in-flight: expected a number >= 1, got 0"},
      {{"submit", task, "--timeout", "-5"}, "--timeout: expected a number >= 0, got -5"},
      {{"submit", task, "--patience", "-2"}, "--patience: expected a number >= 0, got -2"},
      {{"submit", task, "--target-speedup", "-1"}, "--target-speedup: expected a number >= 0, got -1"},
      {{"submit", task, "--proposer", "oracle"}, "--proposer"},
      {{"submit", task, "--campaign-id", "a:b"}, "--campaign-id: expected 1-128 characters"},
      {{"submit", dir.path() + "/no-such-task"}, "no-such-task: no such file or directory"},
      {{"status", "a", "b"}, "b"},
      {{"best"}, "campaign is required"},
      {{"best", "x", "--top", "0"}, "--top"},
      {{"cancel"}, "campaign is required"},
      {{"report"}, "campaign is required"},
      {{"report", "x", "-o", dir.path() + "/no/such/r.html"}, "no/such/r.html: no folder"},
      {{"task"}, "subcommand"},
      {{"task", "validate"}, "dir is required"},
      {{"task", "new", "Bad-Name", "--dir", dir.path()}, "task name 'Bad-Name'"},
      {{"task", "new", "fine", "--dir", dir.path() + "/nonexistent/dir"}, "nonexistent/dir: no such folder"},
      {{"keys", "new", "bad name", "--dir", dir.path()}, "expected 1-64 characters"},
      {{"up", "--budget", "-3"}, "--budget: expected a number >= 0, got -3"},
      {{"--broker", nowhere, "status"}, "broker"},
      {{"--broker", nowhere, "cancel", "x"}, "broker"},
  };
  for (const auto& c : cases) {
    auto r = kiln_cmd(c.args, 60);
    std::string shown;
    for (const auto& a : c.args) shown += a + " ";
    INFO("kiln " << shown << "\nstdout: " << r.out << "\nstderr: " << r.err);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code < 128);  // not killed by a signal (an uncaught exception aborts)
    CHECK(lines(r.err) == 1);
    CHECK(r.err.rfind("kiln: ", 0) == 0);
    CHECK(r.err.find(c.expect) != std::string::npos);
  }
  // Nothing was created for the commands refused above.
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/no"));
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/nonexistent"));
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/fine"));
}

TEST_CASE("a wrong path is named once", "[integration][cli]") {
  const std::string missing = "/no/such/kiln-task";
  for (auto args : {std::vector<std::string>{"task", "validate", missing},
                    std::vector<std::string>{"--broker", "tcp://127.0.0.1:1", "submit", missing}}) {
    auto r = kiln_cmd(args);
    INFO(r.err);
    CHECK(r.err == "kiln: " + missing + ": no such file or directory\n");
  }
}

TEST_CASE("the --json flag is taken before or after the subcommand, with the same output", "[integration][cli]") {
  TempDir dir("kiln-cli-json");
  const std::string task = source_dir() + "/tests/data/tasks/fast_cpu";
  auto before = kiln_cmd({"--json", "task", "validate", task});
  auto after = kiln_cmd({"task", "validate", task, "--json"});
  INFO(before.err << after.err);
  REQUIRE(before.exit_code == 0);
  REQUIRE(after.exit_code == 0);
  CHECK(before.out == after.out);
  CHECK(nlohmann::json::parse(after.out)["valid"] == true);
  // A failure in --json is still an object, and its line on stderr.
  auto bad = kiln_cmd({"task", "validate", dir.path() + "/none", "--json"});
  CHECK(bad.exit_code == 1);
  CHECK(nlohmann::json::parse(bad.out)["valid"] == false);
  auto made = kiln_cmd({"task", "new", "my_json", "--dir", dir.path(), "--json"});
  REQUIRE(made.exit_code == 0);
  CHECK(nlohmann::json::parse(made.out)["created"] == dir.path() + "/my_json");
  // --broker and --config after the subcommand, too.
  auto late = kiln_cmd({"status", "--broker", "notanendpoint"});
  CHECK(late.err.find("--broker: expected tcp://HOST:PORT") != std::string::npos);
}
