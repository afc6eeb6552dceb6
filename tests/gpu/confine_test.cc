// CUDA candidates run confined (DESIGN §5, docs/threat-model.md): the CUDA runtime, the driver and Nsight
// Compute work under the confinement, a candidate whose host code attacks Kiln's files and processes finds
// every attack refused with its verdict otherwise normal, and the confinement costs the measurement
// nothing (program 0 of every bundled task measured confined and not, in turns).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/core/files.h"
#include "kiln/sandbox/sandbox.h"
#include "kiln/tester/confinement.h"
#include "kiln/testing/hostile_probe.h"
#include "kiln/testing/kiln_install.h"
#include "kiln/testing/loopback_listener.h"
#include "rig.h"

using kiln::gpu_test::Rig;
using kiln::gpu_test::summary;
using kiln::gpu_test::task_files;

namespace {

// cuda_transpose's program 0 with the probe called at the start of kiln_entry (its host code).
std::string hostile_transpose(const kiln::testing::ProbeTargets& t) {
  std::string kernel = task_files("cuda_transpose").at("kernel.cu").data;
  const std::string entry = "extern \"C\" KILN_EXPORT int kiln_entry(const kiln_args* args) {";
  const size_t at = kernel.find(entry);
  REQUIRE(at != std::string::npos);
  kernel.insert(at + entry.size(), "\n  kiln_hostile_probe();");
  // One editable region holding the whole file (the rig sends it as the region of an empty kernel.cu).
  for (const char* marker : {"// [EVOLVE_START]\n", "// [EVOLVE_END]\n"})
    kernel.erase(kernel.find(marker), std::strlen(marker));
  return kiln::testing::probe_source(t) + kernel;
}

}  // namespace

TEST_CASE("CUDA candidates run confined: the runtime, the driver and ncu work as the sandbox's user",
          "[gpu][confine]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig rig(120, 0.2, {}, {}, "ncu");
  REQUIRE(rig.tester->confinement().is_ok());
  auto r = rig.evaluate("cuda_softmax");
  INFO(summary(r));
  CHECK(r.status == kiln::proto::TestStatus::kOk);
  CHECK(r.metadata.at("isolation_filesystem") == "readonly_root");
  CHECK(r.metadata.at("isolation_pids") == "pidns");
  CHECK(r.metadata.at("isolation_network") == "netns");
  const std::string user = r.metadata.at("isolation_user");
  std::printf("  confined CUDA evaluation: %s; %s\n", user.c_str(), r.profile_summary.c_str());
  CHECK(user.rfind(kiln::sandbox::can_map_other_ids() ? "uid uid " : "userns uid ", 0) == 0);
  // The profile is feedback: say plainly when ncu could not run confined, and why.
  if (r.profile_summary.rfind("profile", 0) != 0 || r.profile_summary.find("skipped") != std::string::npos)
    WARN("ncu under confinement: " << r.profile_summary);
  CHECK(r.profile_summary.find("profiling skipped") == std::string::npos);
}

TEST_CASE("a CUDA candidate whose host code attacks Kiln's files and processes finds every attack refused",
          "[gpu][confine]") {
  KILN_REQUIRE_GPU_TESTS();
  kiln::testing::Install install;
  kiln::testing::LoopbackListener broker;
  ::setenv("KILN_CONFINE_MARKER", "kiln-tester-environ-marker", 1);
  const auto targets = install.targets(broker.port);
  Rig rig(120, 0.05, {}, {}, "off", kiln::tester::TesterOptions{}.ncu, install.options().hidden_paths);
  REQUIRE(rig.tester->confinement().is_ok());
  auto r = rig.evaluate("cuda_transpose", hostile_transpose(targets));
  INFO(summary(r));
  CHECK(r.status == kiln::proto::TestStatus::kOk);
  const auto seen = kiln::testing::probe_results(r.process.stderr_text + r.log);
  for (const auto& name : kiln::testing::probe_names()) {
    INFO(name);
    REQUIRE(seen.count(name) == 1);
    CHECK(seen.at(name).rfind("refused", 0) == 0);
    std::printf("  %-16s %s\n", name.c_str(), seen.at(name).c_str());
  }
  CHECK(install.unchanged() == "");
  ::unsetenv("KILN_CONFINE_MARKER");
}

TEST_CASE("confinement costs the measurement nothing: program 0 confined and not, in turns", "[gpu][confine]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig confined(120, 0.5);
  Rig open(120, 0.5, /*readonly_root=*/false, {}, "off", kiln::tester::TesterOptions{}.ncu, {}, /*confine=*/false);
  REQUIRE(confined.tester->confinement().is_ok());
  for (const char* task : {"cuda_rmsnorm", "cuda_softmax", "cuda_sgemm", "cuda_reduce_sum", "cuda_transpose"}) {
    for (int round = 0; round < 2; ++round) {
      for (Rig* rig : {&confined, &open}) {
        auto r = rig->evaluate(task);
        INFO(task << ": " << summary(r));
        REQUIRE(r.status == kiln::proto::TestStatus::kOk);
        REQUIRE(!r.performance.cases.empty());
        const auto& c = r.performance.cases[0];
        std::printf("  %-16s %-10s speedup %.3f [%.3f, %.3f]  eval_child_s %s  test %.2f s\n", task,
                    rig == &confined ? "confined" : "open", c.speedup, c.speedup_lo, c.speedup_hi,
                    r.metadata.count("eval_child_s") ? r.metadata.at("eval_child_s").c_str() : "?", r.duration_s);
      }
    }
  }
  // The start-up cost alone: the evaluator's --help, 20 times each way.
  kiln::TempDir scratch("kiln-confine-cost");
  for (bool confine : {true, false}) {
    kiln::sandbox::SandboxOptions run;
    run.argv = {confine ? std::string(kiln::tester::kChildBinDir) + "/kiln-eval-cuda"
                        : std::string(KILN_BINARY_DIR "/bin/kiln-eval-cuda"),
                "--help"};
    run.working_dir = scratch.path();
    run.env = {"PATH=/usr/bin:/bin"};
    if (confine) {
      kiln::sandbox::Confinement c;
      c.uid = c.gid = 99000;
      c.binds.push_back({KILN_BINARY_DIR "/bin", kiln::tester::kChildBinDir, false});
      run.confine = c;
      ::chmod(scratch.path().c_str(), 0777);
    }
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i) REQUIRE(kiln::sandbox::run_sandboxed(run).is_ok());
    const double per_run_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / 20;
    std::printf("  sandbox start-up, %s: %.2f ms per run\n", confine ? "confined" : "not confined", per_run_ms);
  }
}
