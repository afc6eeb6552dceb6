// The cheating battery with a PyTorch reference (issue 34): the task of harness.h (y = x * alpha + w) whose
// reference is a KernelBench-format module that the real kiln-eval runs in a Python runner of its own,
// in the sandbox, the way the tester runs it. The checks that guard a C reference (poisoned outputs,
// moving inputs, the input checks, the comparison of timed rounds) must hold here too, and the reference
// runner is one more process a candidate could go for: the candidate must not read its memory, map its
// arena or signal it.
//
// Each cheat has the verdict it must get; a crash of kiln-eval itself reads "crashed" with an exit code or
// a signal and fails every one of them. The probes print what they tried and how it ended on stderr
// ("kiln-probe ..."), so that a probe that found nothing to attack (no reference runner in sight) fails
// the test instead of passing it vacuously.
#include <catch2/catch.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"
#include "kiln/testing/loopback_listener.h"
#include "kiln/testing/skip.h"
#include "kiln/testing/torch.h"
#include "torch_probes.h"

using kiln::trust::Harness;
using kiln::trust::kHonestBody;
using kiln::trust::promotable;
using kiln::trust::Timing;
using kiln::trust::Verdict;
using status = kiln::proto::TestStatus;

namespace {

// The task of harness.h with the module as its reference. The benchmark case is small: a call of the
// module costs the interpreter's few microseconds on top of the work, so an honest C loop is faster.
const std::string kTaskYaml = kiln::trust::scale_add_task_yaml("scale_add_torch", 8192);

constexpr const char* kModule = R"py(import torch
import torch.nn as nn

N = 8192


class Model(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x, w):
        return x * self.alpha + w


def get_inputs():
    return [torch.randn(N), torch.rand(N) * 2 - 1]


def get_init_inputs():
    return [2.0]
)py";

// Short timing: the verdicts here rest on the checks, never on a speed.
Timing quick() {
  Timing t;
  t.min_samples = 5;
  t.min_time_s = 0.05;
  t.max_time_s = 0.3;
  t.max_noise = 0.05;
  t.warmup = 1;
  return t;
}

Timing correctness_only() {
  Timing t = quick();
  t.measure = false;
  return t;
}

// Compiles the candidate and evaluates it against the module; skips where python3 has no torch.
Verdict run(const std::string& name, const std::string& body, const std::string& globals = "",
            const Timing& timing = correctness_only()) {
  if (!kiln::testing::have_torch()) KILN_SKIP(kiln::testing::kSystemPython << " has no torch here");
  Harness h;
  h.use_torch_reference(kTaskYaml, kModule, kiln::testing::kSystemPython);
  Verdict v = kiln::trust::run(h, name, body, globals, timing, "", 60);
  INFO(kiln::testing::status_word(v.status) << ": " << v.message << "\n" << v.child.stderr_text);
  // kiln-eval's own crash (or a refusal to evaluate) is never a verdict on the candidate.
  REQUIRE(v.child.exit_code == 0);
  REQUIRE(v.child.term_signal == 0);
  REQUIRE_FALSE(v.child.timed_out);
  return v;
}

// The "kiln-probe ..." lines the candidate printed.
std::vector<std::string> probe_lines(const Verdict& v) {
  std::vector<std::string> lines;
  std::istringstream in(v.child.stderr_text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("kiln-probe ", 0) == 0) lines.push_back(line);
  return lines;
}

// The probes found the reference runner, made `attempts` attempts on it, and every one was refused.
void check_all_refused(const Verdict& v, size_t attempts) {
  const std::vector<std::string> lines = probe_lines(v);
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  INFO(all);
  size_t refused = 0;
  for (const auto& l : lines) {
    CHECK(l.find(": GOT") == std::string::npos);
    if (l.find(": refused (") != std::string::npos) ++refused;
  }
  CHECK(all.find("kiln-probe reference runner: -1") == std::string::npos);
  CHECK(all.find("kiln-probe reference runner: ") != std::string::npos);
  CHECK(refused == attempts);
}

}  // namespace

TEST_CASE("an honest candidate passes against a PyTorch reference, with a speedup", "[trust][torch][serial]") {
  Verdict v = run("torch_honest", kHonestBody, "", quick());
  INFO(v.message << "\n" << v.child.stderr_text);
  CHECK(v.status == status::kOk);
  CHECK(v.report.correctness.passed);
  CHECK(v.report.correctness.mismatches == 0);
  REQUIRE(v.report.performance.measured);
  REQUIRE(v.report.performance.cases.size() == 1);
  const auto& c = v.report.performance.cases[0];
  CHECK(c.reference.median_us > 0);
  CHECK(c.candidate.median_us > 0);
  CHECK(c.speedup > 1.0);
}

// ---- The reference runner: its memory, its arena and its signals are out of the candidate's reach. ----

TEST_CASE("a candidate that reads the reference's outputs out of the reference runner gets nothing", "[trust][torch]") {
  // It writes only what it reads from the Python runner or from the evaluator (memory maps, the arena's
  // memfd, /proc/<pid>/mem, process_vm_readv, ptrace, pidfd_getfd, map_files): the runner made itself
  // non-dumpable before the candidate's runner existed, so did the evaluator, and the candidate's runner
  // may not ptrace or read another process's memory. Every read refused, the outputs stay poisoned.
  Verdict v = run("torch_reach_in",
                  "static bool first = true;\n"
                  "steal(y, static_cast<size_t>(n) * sizeof(float), first);\n"
                  "first = false;",
                  std::string(kiln::trust::kProbeCommon) + kiln::trust::kReachIn);
  INFO(v.message);
  CHECK(v.status == status::kNonFinite);
  CHECK(v.message.find("non-finite outputs where the reference is finite") != std::string::npos);
  check_all_refused(v, 18);
}

TEST_CASE("a candidate cannot stop or kill the reference runner", "[trust][torch]") {
  // Stopped, the reference would hang the evaluation or be slow in its timed calls; killed, there would
  // be nothing to compare with. Every signal is refused (the runner may signal only itself) and the
  // candidate, honest besides, passes: had one got through, the evaluation would have failed.
  Verdict v = run("torch_signals",
                  "static bool tried = false;\n"
                  "if (!tried) { tried = true; signal_reference(); }\n" +
                      kHonestBody,
                  std::string(kiln::trust::kProbeCommon) + kiln::trust::kSignals);
  INFO(v.message);
  CHECK(v.status == status::kOk);
  CHECK(v.report.correctness.passed);
  check_all_refused(v, 6);
}

TEST_CASE("no other runner's arena is mapped in a candidate's process, in any timing block", "[trust][torch]") {
  // The reference runner (Python: started once, its process kept for every block) shares an arena with the
  // evaluator; every timing block after the first runs the candidate in a process forked from the
  // evaluator. Were that arena mapped in the fork, the candidate would find the reference's inputs and
  // outputs of the round in its own address space and could serve the reference's answer instead of
  // computing it. This candidate does so wherever it can, and computes otherwise.
  Verdict v = run("torch_arena_in_self", "if (from_other_arena(a, y, n)) return 0;\n" + kHonestBody,
                  std::string(kiln::trust::kProbeCommon) + kiln::trust::kArenaInSelf, quick());
  INFO(v.message);
  CHECK(v.status == status::kOk);
  const std::vector<std::string> lines = probe_lines(v);
  std::string all;
  std::set<std::string> runners;
  for (const auto& l : lines) {
    all += l + "\n";
    if (l.find(" other arenas mapped here") != std::string::npos) runners.insert(l.substr(0, l.find(':')));
  }
  INFO(all);
  CHECK(all.find("served a call from another arena") == std::string::npos);
  CHECK(all.find(": 0 other arenas mapped here") != std::string::npos);
  for (const auto& l : lines) CHECK(l.find(": 0 other arenas mapped here") != std::string::npos);
  // The runner of correctness and the first block, and at least one forked for a later block.
  CHECK(runners.size() >= 2);
}

// ---- Caches: the poisoned outputs and the moving inputs catch them as with a C reference. ----

TEST_CASE("reusing the previous call's result is caught on the next seed", "[trust][torch]") {
  // The second call of a case and seed gets the same inputs as the first, and is served from the first's
  // result; the first call of the next seed gets new inputs, and the old result.
  Verdict v = run("torch_previous_result",
                  "if (n == last_n) { std::memcpy(y, last, n * sizeof(float)); return 0; }\n" + kHonestBody +
                      "\nif (n <= kMax) { std::memcpy(last, y, n * sizeof(float)); last_n = n; }",
                  "constexpr int64_t kMax = 1 << 16; static float last[kMax]; static int64_t last_n = -1;");
  INFO(v.message);
  CHECK(v.status == status::kMismatch);
  REQUIRE_FALSE(v.report.correctness.first_mismatches.empty());
  CHECK(v.report.correctness.first_mismatches[0].find("seed 1") != std::string::npos);
}

TEST_CASE("a candidate correct on the first seed only is caught on the second", "[trust][torch]") {
  // Honest on the first two calls of every size (the first seed's), off by a little after them.
  Verdict v =
      run("torch_first_seed",
          "int& calls = per_size[n];\n"
          "if (++calls > 2) { for (int64_t i = 0; i < n; ++i) y[i] = x[i] * alpha + w[i] + 0.01f; return 0; }\n" +
              kHonestBody,
          "#include <map>\nstatic std::map<int64_t, int> per_size;");
  INFO(v.message);
  CHECK(v.status == status::kMismatch);
  REQUIRE_FALSE(v.report.correctness.first_mismatches.empty());
  CHECK(v.report.correctness.first_mismatches[0].find("seed 1") != std::string::npos);
}

TEST_CASE("results cached by input address are caught by the comparison of timed rounds", "[trust][torch]") {
  // Right on every correctness call (new inputs at new places) and then served from the cache while timed,
  // where the inputs stay put but move a block before every round.
  Verdict v =
      run("torch_address_cache",
          "if (x == cx && w == cw && n == cn && n <= kMax) { std::memcpy(y, cache, n * sizeof(float)); return 0; }\n" +
              kHonestBody + "\nif (n <= kMax) { std::memcpy(cache, y, n * sizeof(float)); cx = x; cw = w; cn = n; }",
          "constexpr int64_t kMax = 1 << 16; static float cache[kMax];\n"
          "static const float* cx = nullptr; static const float* cw = nullptr; static int64_t cn = -1;",
          quick());
  INFO(v.message);
  CHECK(v.status == status::kMismatch);
  CHECK(v.report.correctness.mismatches > 0);
  CHECK_FALSE(promotable(v));
}

// ---- Writes outside the outputs. ----

TEST_CASE("writing into the arena in front of the output is caught as a modified input", "[trust][torch]") {
  // The page before the output holds the end of the last input: the candidate zeroes it (scratch space,
  // it hopes, outside every tensor).
  Verdict v = run("torch_arena_write", kHonestBody + "\nstd::memset(reinterpret_cast<char*>(y) - 4096, 0, 4096);");
  INFO(v.message);
  CHECK(v.status == status::kInputModified);
  CHECK(v.message.find("input 'w' was modified") != std::string::npos);
}

// ---- The clock. ----

TEST_CASE("a candidate that sleeps or spins only while timed is timed with it", "[trust][torch][serial]") {
  // Honest throughout; on the benchmark case (the size only timing and the check after it use) it waits
  // 5 ms in every call, asleep on odd calls and spinning on the clock on even ones. (Not by a call count:
  // the timing blocks after the first run in fresh processes, whose count starts again.) Both waits are on
  // the clock: the speedup is far below 1, never a promotion.
  Verdict v = run("torch_sleeps_when_timed",
                  kHonestBody +
                      "\nif (n == 8192) {\n"
                      "  if (++calls % 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));\n"
                      "  else for (auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);\n"
                      "            std::chrono::steady_clock::now() < until;) {}\n"
                      "}",
                  "#include <chrono>\n#include <thread>\nstatic int calls = 0;", quick());
  INFO(v.message);
  CHECK(v.status == status::kOk);
  REQUIRE(v.report.performance.cases.size() == 1);
  CHECK(v.report.performance.cases[0].candidate.median_us >= 5000);
  CHECK(v.report.performance.cases[0].speedup < 1);
  CHECK_FALSE(promotable(v));
}

// ---- The machine: processes, the network, files outside the scratch directory, and the task's files. ----

TEST_CASE("a candidate cannot fork, reach the network, write outside its scratch dir, or swap the module",
          "[trust][torch]") {
  kiln::testing::LoopbackListener listener;
  REQUIRE(listener.port > 0);
  kiln::TempDir outside("kiln-trust-outside");
  const std::string planted = outside.path() + "/planted", registry = outside.path() + "/registry.db";
  REQUIRE(kiln::write_file_atomic(registry, "entries").is_ok());
  // On its first call the candidate tries to start a process, to connect to a listener, to create a file
  // outside its scratch directory and to open a registry for writing, each of which must be refused. Then
  // it rewrites the task's reference.py in the scratch directory (which it may write) into a module that
  // returns zeros, plants modules where an interpreter might look for them (its working directory and
  // HOME are that directory), and returns zeros itself on every call: the module the evaluator runs was
  // read before the candidate ran and the interpreter runs isolated (-I), so the verdict is a mismatch.
  Verdict v = run("torch_machine",
                  "static bool tried = false;\n"
                  "if (!tried) {\n"
                  "  tried = true;\n"
                  "  const pid_t pid = fork();\n"
                  "  if (pid == 0) _exit(0);\n"
                  "  note(\"fork\", pid > 0, errno);\n"
                  "  const int s = socket(AF_INET, SOCK_STREAM, 0);\n"
                  "  sockaddr_in addr{}; addr.sin_family = AF_INET; addr.sin_port = htons(" +
                      std::to_string(listener.port) +
                      ");\n"
                      "  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);\n"
                      "  const bool connected = s >= 0 && connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) "
                      "== 0;\n"
                      "  note(\"connect to 127.0.0.1\", connected, errno);\n"
                      "  int fd = open(\"" +
                      planted +
                      "\", O_CREAT | O_WRONLY, 0644);\n"
                      "  note(\"a new file outside the scratch directory\", fd >= 0, errno);\n"
                      "  fd = open(\"" +
                      registry +
                      "\", O_WRONLY | O_APPEND);\n"
                      "  note(\"the registry for writing\", fd >= 0, errno);\n"
                      "  for (const char* path : {\"task/reference.py\", \"sitecustomize.py\", \"usercustomize.py\",\n"
                      "                           \"torch.py\", \"reference.py\"}) {\n"
                      "    FILE* f = std::fopen(path, \"w\");\n"
                      "    if (f) { std::fputs(kZeros, f); std::fclose(f); }\n"
                      "    std::fprintf(stderr, \"kiln-swap %s: %s\\n\", path, f ? \"written\" : \"not written\");\n"
                      "  }\n"
                      "}\n"
                      "for (int64_t i = 0; i < n; ++i) y[i] = 0.f;",
                  std::string(kiln::trust::kProbeCommon) +
                      "#include <arpa/inet.h>\n#include <netinet/in.h>\n#include <sys/socket.h>\n"
                      "static const char* kZeros = \"import torch\\nimport torch.nn as nn\\nN = 8192\\n"
                      "class Model(nn.Module):\\n    def __init__(self, alpha):\\n        super().__init__()\\n"
                      "    def forward(self, x, w):\\n        return torch.zeros_like(x)\\n"
                      "def get_inputs():\\n    return [torch.randn(N), torch.randn(N)]\\n"
                      "def get_init_inputs():\\n    return [2.0]\\n\";\n");
  INFO(v.message);
  const std::string all = v.child.stderr_text;
  INFO(all);
  if (v.child.filesystem_isolation != "readonly_root")
    KILN_SKIP("mount namespaces are not permitted here: writes outside the scratch dir are not prevented");
  CHECK(v.status == status::kMismatch);
  CHECK(all.find(": GOT") == std::string::npos);
  CHECK(probe_lines(v).size() == 4);
  // The swap was made, in the scratch directory: it is the evaluator that did not take it.
  CHECK(all.find("kiln-swap task/reference.py: written") != std::string::npos);
  CHECK_FALSE(kiln::read_file(planted).is_ok());
  CHECK(*kiln::read_file(registry) == "entries");
}
