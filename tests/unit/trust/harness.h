// Runs a candidate the way the tester does (DESIGN §5): a scratch directory with the task package and
// both shared objects, the real kiln-eval as a sandboxed child with a scrubbed environment, and the
// msgpack TestReport it writes read back. Kernels are compiled with the system g++ like the compiler
// service would. Test-only.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/files.h"
#include "kiln/core/hash.h"
#include "kiln/eval/tool.h"
#include "kiln/proto/codec.h"
#include "kiln/proto/payloads.h"
#include "kiln/sandbox/sandbox.h"
#include "kiln/testing/test_status.h"

namespace kiln::trust {

// y = x * alpha + w over N fp32 elements: cheap to compile and to run, odd sizes to catch tail bugs, and a
// benchmark case of `benchmark_n` elements (by default 3 MiB of tensors: a call takes tens of microseconds).
inline std::string scale_add_task_yaml(const std::string& name = "scale_add", int64_t benchmark_n = 262144) {
  return "name: " + name + R"yaml(
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
  cases: [{N: )yaml" +
         std::to_string(benchmark_n) + "}]\n";
}

// A whole kernel source: `body` runs inside kiln_entry with x, w, y, n and alpha in scope; `globals`
// goes above it.
inline std::string kernel_source(const std::string& body, const std::string& globals = "") {
  return R"(#include <cmath>
#include <cstdint>
#include <cstring>
#include "kiln/kernel_abi.h"
)" + globals +
         R"(
extern "C" KILN_EXPORT int kiln_entry(const kiln_args* a) {
  const float* x = static_cast<const float*>(a->inputs[0].data);
  const float* w = static_cast<const float*>(a->inputs[1].data);
  float* y = static_cast<float*>(a->outputs[0].data);
  const int64_t n = a->inputs[0].shape[0];
  const float alpha = static_cast<float>(kiln_scalar(a, "alpha", 1.0));
  (void)x; (void)w; (void)y; (void)n; (void)alpha;
  // [EVOLVE_START]
)" + body +
         R"(
  // [EVOLVE_END]
  return 0;
}
)";
}

inline const std::string kHonestBody = "for (int64_t i = 0; i < n; ++i) y[i] = x[i] * alpha + w[i];";

// The promotion rule of DESIGN §7: a kernel is promoted only if the lower bound of its speedup interval
// is at least this.
inline constexpr double kPromotionSpeedup = 1.10;

// Timing options for kiln-eval: short by default, the A/A run passes longer ones.
struct Timing {
  std::string mode = "warm";
  int min_samples = 10;
  double min_time_s = 0.1;
  double max_time_s = 1.0;
  double max_noise = 0.005;
  int warmup = 2;
  bool measure = true;
};

// The verdict as the tester would report it: kiln-eval's report, or the sandbox's outcome when the child
// died before writing one.
struct Verdict {
  std::optional<proto::TestStatus> status;  // none when the harness itself failed (harness_failed)
  bool harness_failed = false;
  std::string message;
  proto::TestReport report;
  sandbox::SandboxResult child;
};

inline bool promotable(const Verdict& v) {
  if (v.status != proto::TestStatus::kOk || !v.report.performance.measured) return false;
  for (const auto& c : v.report.performance.cases) {
    if (!(c.speedup_lo >= kPromotionSpeedup)) return false;
  }
  return !v.report.performance.cases.empty();
}

class Harness {
 public:
  Harness() : dir_("kiln-trust") {}

  // Compiles a kernel source into a shared object; "" (and a failed REQUIRE upstream) on error.
  std::string compile(const std::string& name, const std::string& source, const std::string& extra_flags = "") {
    const std::string base = dir_.path() + "/" + name;
    if (!write_file_atomic(base + ".cpp", source).is_ok()) return "";
    const std::string cmd = "g++ -O2 -shared -fPIC -fopenmp -std=c++17 -I" KILN_SOURCE_DIR "/libs/core/include " +
                            extra_flags + " -o " + base + ".so " + base + ".cpp";
    if (std::system(cmd.c_str()) != 0) return "";
    auto so = read_file(base + ".so");
    return so.is_ok() ? *so : "";
  }

  // Evaluates against a PyTorch module instead: `task_yaml` and `module` (reference.py) make the package,
  // there is no reference.so, and kiln-eval runs the module with `python`.
  void use_torch_reference(std::string task_yaml, std::string module, std::string python) {
    torch_yaml_ = std::move(task_yaml);
    torch_module_ = std::move(module);
    python_ = std::move(python);
  }

  const std::string& reference() {
    if (reference_.empty()) reference_ = compile("reference", kernel_source(kHonestBody));
    return reference_;
  }

  // The sandbox options the tester should use (DESIGN §5 plus this repo's hardening).
  static sandbox::SandboxOptions sandbox_options(const std::string& scratch, double timeout_s) {
    sandbox::SandboxOptions run;
    run.working_dir = scratch;
    run.env = {"PATH=/usr/bin:/bin", "HOME=" + scratch, "TMPDIR=" + scratch, "LC_ALL=C"};
    // As the tester: where Kiln's own shared libraries were found (a deployment that ships them beside it).
    if (const char* lib_path = std::getenv("LD_LIBRARY_PATH"); lib_path && *lib_path)
      run.env.push_back(std::string("LD_LIBRARY_PATH=") + lib_path);
    run.timeout_s = timeout_s;
    run.file_size_bytes = 256ll << 20;
    run.max_output_bytes = 64 << 10;
    run.isolate_network = true;
    run.readonly_root = true;  // process creation is refused inside kiln-eval's runners (the tester's setup)
    return run;
  }

  // Evaluates `kernel_so` against the reference through kiln-eval in the sandbox.
  Verdict evaluate(const std::string& kernel_so, const Timing& t = {}, double timeout_s = 30,
                   const std::string& reference_so = "") {
    TempDir scratch("kiln-trust-scratch");
    const std::string s = scratch.path();
    Verdict v;
    const bool torch = !torch_module_.empty();
    if (!make_dirs(s + "/task").is_ok() ||
        !write_file_atomic(s + "/task/task.yaml", torch ? torch_yaml_ : scale_add_task_yaml()).is_ok() ||
        !write_file_atomic(s + (torch ? "/task/reference.py" : "/task/reference.cpp"),
                           torch ? torch_module_ : kernel_source(kHonestBody))
             .is_ok() ||
        !write_file_atomic(s + "/task/kernel.cpp", kernel_source(kHonestBody)).is_ok() ||
        !write_file_atomic(s + "/kernel.so", kernel_so).is_ok() ||
        (!torch &&
         !write_file_atomic(s + "/reference.so", reference_so.empty() ? reference() : reference_so).is_ok())) {
      v.harness_failed = true;
      v.message = "cannot write the scratch directory";
      return v;
    }
    sandbox::SandboxOptions run = sandbox_options(s, timeout_s);
    run.argv = {KILN_BINARY_DIR "/bin/kiln-eval",
                "--task",
                "task",
                "--kernel",
                "kernel.so",
                "--out",
                "result.msgpack",
                "--mode",
                t.mode,
                "--min-samples",
                std::to_string(t.min_samples),
                "--min-time",
                std::to_string(t.min_time_s),
                "--max-time",
                std::to_string(t.max_time_s),
                "--max-noise",
                std::to_string(t.max_noise),
                "--warmup",
                std::to_string(t.warmup)};
    if (torch)
      run.argv.insert(run.argv.end(), {"--python", python_});
    else
      run.argv.insert(run.argv.end(), {"--reference", "reference.so"});
    if (!t.measure) run.argv.push_back("--no-timing");
    // As the tester does: a fresh key authenticates the report, and only an authentic one is believed.
    const std::string key = random_bytes(32);
    if (key.size() != 32 || !write_file_atomic(s + "/report.key", key).is_ok()) {
      v.harness_failed = true;
      v.message = "cannot write the report key";
      return v;
    }
    run.argv.insert(run.argv.end(), {"--report-key", "report.key"});
    auto child = sandbox::run_sandboxed(run);
    if (!child.is_ok()) {
      v.harness_failed = true;
      v.message = child.status().to_string();
      return v;
    }
    v.child = std::move(child).value();
    if (v.child.timed_out) {
      v.status = proto::TestStatus::kTimedOut;
      v.message = "timed out after " + sandbox::format_seconds(timeout_s);
    } else if (v.child.term_signal != 0) {
      v.status = proto::TestStatus::kCrashed;
      v.message = "crashed: " + sandbox::signal_description(v.child.term_signal);
    } else if (v.child.exit_code != 0) {
      v.status = proto::TestStatus::kCrashed;
      v.message = "crashed: exit code " + std::to_string(v.child.exit_code);
    } else if (auto bytes = read_file(s + "/result.msgpack"); !bytes.is_ok()) {
      v.status = proto::TestStatus::kCrashed;
      v.message = "crashed: exited without writing a result";
    } else if (auto mac = read_file(eval::report_mac_path(s + "/result.msgpack"));
               !mac.is_ok() || !eval::report_authentic(key, *bytes, *mac)) {
      v.status = proto::TestStatus::kCrashed;
      v.message = "crashed: the result was not written by the evaluator (its authentication failed)";
    } else if (auto report = proto::decode<proto::TestReport>(*bytes); !report.is_ok()) {
      v.status = proto::TestStatus::kCrashed;
      v.message = "crashed: unreadable result";
    } else {
      v.report = std::move(report).value();
      v.status = v.report.status;
      v.message = v.report.message;
    }
    return v;
  }

  const std::string& dir() const { return dir_.path(); }

 private:
  TempDir dir_;
  std::string reference_;
  std::string torch_yaml_, torch_module_, python_;
};

// Compiles a kernel whose editable region is `body` and evaluates it; a harness failure fails the test.
inline Verdict run(Harness& h, const std::string& name, const std::string& body, const std::string& globals = "",
                   const Timing& timing = {}, const std::string& flags = "", double timeout_s = 30) {
  const std::string so = h.compile(name, kernel_source(body, globals), flags);
  REQUIRE_FALSE(so.empty());
  Verdict v = h.evaluate(so, timing, timeout_s);
  INFO(testing::status_word(v.status) << ": " << v.message << "\n" << v.child.stderr_text);
  REQUIRE_FALSE(v.harness_failed);
  return v;
}

}  // namespace kiln::trust
