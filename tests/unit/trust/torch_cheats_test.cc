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
#include <string>

#include "harness.h"
#include "kiln/testing/skip.h"
#include "kiln/testing/torch.h"

using kiln::trust::Harness;
using kiln::trust::kHonestBody;
using kiln::trust::Timing;
using kiln::trust::Verdict;
namespace status = kiln::proto::test_status;

namespace {

// The task of harness.h with the module as its reference. The benchmark case is small: a call of the
// module costs the interpreter's few microseconds on top of the work, so an honest C loop is faster.
constexpr const char* kTaskYaml = R"yaml(name: scale_add_torch
op: scale_add
backend: cpu
dtype: fp32
inputs:
  - {name: x, dtype: fp32, shape: [N], init: normal}
  - {name: w, dtype: fp32, shape: [N], init: "uniform(-1, 1)"}
outputs:
  - {name: y, dtype: fp32, shape: [N]}
scalars: {alpha: 2.0}
correctness:
  cases: [{N: 1}, {N: 17}, {N: 1001}, {N: 4099}]
  seeds: 2
  rtol: 1.0e-5
  atol: 1.0e-6
benchmark:
  cases: [{N: 8192}]
)yaml";

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
  INFO(v.status << ": " << v.message << "\n" << v.child.stderr_text);
  // kiln-eval's own crash (or a refusal to evaluate) is never a verdict on the candidate.
  REQUIRE(v.child.exit_code == 0);
  REQUIRE(v.child.term_signal == 0);
  REQUIRE_FALSE(v.child.timed_out);
  return v;
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
