#include "kiln/eval/eval.h"

#include <catch2/catch.hpp>
#include <string>

#include "kernels.h"
#include "kiln/testing/test_status.h"

using kiln::eval::EvalOptions;
using kiln::eval::KernelLibrary;
using kiln::eval::testing::build_kernel;
using kiln::task::DType;
using kiln::task::InitKind;
using kiln::task::TaskSpec;
using status = kiln::proto::TestStatus;

namespace {

// y[i] = x[i] * scale + w[i]: small enough to compile in a blink, odd sizes to catch tail bugs.
TaskSpec axpy_task() {
  TaskSpec spec;
  spec.name = "axpy";
  spec.op = "axpy";
  spec.backend = kiln::proto::Backend::kCpu;
  spec.dtype = "fp32";
  spec.inputs = {{"x", DType::kF32, {"N"}, InitKind::kNormal, 0, 1},
                 {"w", DType::kF32, {"N"}, InitKind::kUniform, -1, 1}};
  spec.outputs = {{"y", DType::kF32, {"N"}, InitKind::kZeros, 0, 0}};
  spec.scalars = {{"scale", 2.0}};
  spec.correctness_cases = {{{"N", 1}}, {{"N", 17}}, {{"N", 1001}}};
  spec.seeds = 2;
  spec.rtol = 1e-5;
  spec.atol = 1e-6;
  spec.benchmark_cases = {{{"N", 4096}}};
  return spec;
}

std::string axpy_kernel(const std::string& body, const std::string& globals = "") {
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
  const float s = static_cast<float>(kiln_scalar(a, "scale", 1.0));
  (void)x; (void)w; (void)y; (void)n; (void)s;
)" + body +
         R"(
  return 0;
}
)";
}

const std::string kCorrect = "for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s + w[i];";

EvalOptions quick(bool measure = false) {
  EvalOptions o;
  o.measure = measure;
  o.timing.mode = "warm";
  o.timing.min_samples = 5;
  o.timing.min_time_s = 0.02;
  o.timing.max_time_s = 0.5;
  o.timing.warmup_iters = 1;
  return o;
}

kiln::proto::TestReport run(const std::string& name, const std::string& kernel_source,
                            const EvalOptions& options = quick(), const TaskSpec& spec = axpy_task()) {
  std::string ref_path = build_kernel("reference", axpy_kernel(kCorrect));
  std::string cand_path = build_kernel(name, kernel_source);
  REQUIRE(!ref_path.empty());
  REQUIRE(!cand_path.empty());
  auto ref = KernelLibrary::open(ref_path);
  auto cand = KernelLibrary::open(cand_path);
  REQUIRE(ref.is_ok());
  REQUIRE(cand.is_ok());
  auto report = kiln::eval::evaluate(spec, cand->entry(), ref->entry(), options);
  INFO(report.status().to_string());
  REQUIRE(report.is_ok());
  INFO(report->message);
  return std::move(report).value();
}

}  // namespace

TEST_CASE("a correct kernel passes and is timed against the reference", "[eval]") {
  auto r = run("correct", axpy_kernel(kCorrect), quick(true));
  CHECK(r.status == status::kOk);
  CHECK(r.correctness.passed);
  CHECK(r.correctness.mismatches == 0);
  CHECK(r.correctness.max_abs_error == 0);
  CHECK(r.correctness.rtol == 1e-5);
  CHECK(r.correctness.tested_shapes == std::vector<std::string>{"N=1", "N=17", "N=1001", "N=4096"});
  REQUIRE(r.performance.measured);
  CHECK(r.performance.method == "host_clock");
  CHECK(r.performance.mode == "warm");
  REQUIRE(r.performance.cases.size() == 1);
  const auto& c = r.performance.cases[0];
  CHECK(c.dims == std::map<std::string, int64_t>{{"N", 4096}});
  CHECK(c.candidate.n >= 5);
  CHECK(c.candidate.n == c.reference.n);
  CHECK(c.candidate.median_us > 0);
  CHECK(c.candidate.p10_us <= c.candidate.median_us);
  CHECK(c.candidate.median_us <= c.candidate.p90_us);
  CHECK(c.speedup == Approx(c.reference.median_us / c.candidate.median_us));
  CHECK(c.speedup_lo > 0);
  CHECK(c.speedup_lo <= c.speedup_hi);
  CHECK(c.warmup_iters == 1);
  CHECK((c.stop_reason == "noise" || c.stop_reason == "stalled" || c.stop_reason == "max_time"));
  CHECK(r.message.find("speedup") != std::string::npos);
}

TEST_CASE("cold mode is accepted, measured and recorded as cold", "[eval]") {
  auto options = quick(true);
  options.timing.mode = "cold";
  auto r = run("correct", axpy_kernel(kCorrect), options);
  CHECK(r.status == status::kOk);
  CHECK(r.performance.mode == "cold");
  CHECK(r.performance.measured);
}

TEST_CASE("a wrong value is a mismatch with its location", "[eval]") {
  auto r = run("wrong_value", axpy_kernel(kCorrect + "\n if (n > 5) y[5] += 0.5f;"));
  CHECK(r.status == status::kMismatch);
  CHECK_FALSE(r.correctness.passed);
  CHECK(r.correctness.mismatches > 0);
  CHECK(r.correctness.max_abs_error == Approx(0.5).epsilon(1e-3));
  REQUIRE_FALSE(r.correctness.first_mismatches.empty());
  CHECK(r.correctness.first_mismatches[0].rfind("y[5]: got ", 0) == 0);
  CHECK(r.correctness.first_mismatches[0].find("(N=17 seed 0)") != std::string::npos);
  CHECK(r.correctness.first_mismatches.size() <= 5);
  CHECK_FALSE(r.performance.measured);
}

TEST_CASE("a NaN output is non-finite", "[eval]") {
  auto r = run("nan_output", axpy_kernel(kCorrect + "\n y[n / 2] = NAN;"));
  CHECK(r.status == status::kNonFinite);
  CHECK(r.message.find("non-finite") != std::string::npos);
}

TEST_CASE("a kernel that skips the tail of an odd size is caught", "[eval]") {
  auto r = run("skips_tail", axpy_kernel("for (int64_t i = 0; i + 8 <= n; i += 8)\n"
                                         "  for (int k = 0; k < 8; ++k) y[i + k] = x[i + k] * s + w[i + k];"));
  // The skipped elements still hold the NaN the outputs were filled with.
  CHECK(r.status == status::kNonFinite);
  CHECK_FALSE(r.correctness.passed);
  REQUIRE_FALSE(r.correctness.first_mismatches.empty());
  CHECK(r.correctness.first_mismatches[0].find("got nan") != std::string::npos);
}

TEST_CASE("a kernel that writes into its input is caught", "[eval]") {
  auto r = run("writes_input", axpy_kernel(kCorrect + "\n const_cast<float*>(x)[0] = 42.f;"));
  CHECK(r.status == status::kInputModified);
  CHECK(r.message.find("input 'x' was modified") != std::string::npos);
}

TEST_CASE("a kernel that relies on outputs surviving between calls is caught", "[eval]") {
  SECTION("computes only on its first call") {
    auto r = run("first_call_only",
                 axpy_kernel("if (done) return 0;\n done = true;\n" + kCorrect, "static bool done = false;"));
    CHECK(r.status == status::kNonFinite);
    CHECK(r.correctness.first_mismatches[0].find("second call") != std::string::npos);
  }
  SECTION("returns the previous call's result") {
    auto r = run("stale_copy", axpy_kernel("if (prev_n == n) { std::memcpy(y, prev, n * sizeof(float)); }\n"
                                           "for (int64_t i = 0; i < n && i < 2048; ++i) prev[i] = x[i] * s + w[i];\n"
                                           "if (prev_n != n) std::memcpy(y, prev, n * sizeof(float));\n"
                                           "prev_n = n;",
                                           "static float prev[2048]; static int64_t prev_n = -1;"));
    CHECK(r.status == status::kMismatch);
  }
}

TEST_CASE("a kernel that goes wrong after many calls is caught by the checks during or after timing", "[eval]") {
  // Correctness makes 12 calls (3 cases x 2 seeds x 2) and warm-up 1 in the first runner process, which
  // then times at least 2 rounds (its generation) and makes the check after timing: the kernel turns bad
  // in its second timed round, whatever the load, and the check after timing sees it for certain (later
  // generations run in fresh processes, whose count starts again).
  auto r = run("degrades",
               axpy_kernel("if (++calls > 14) { for (int64_t i = 0; i < n; ++i) y[i] = 0; return 0; }\n" + kCorrect,
                           "static int calls = 0;"),
               quick(true));
  CHECK(r.status == status::kMismatch);
  REQUIRE_FALSE(r.correctness.first_mismatches.empty());
  const std::string& where = r.correctness.first_mismatches[0];
  CHECK((where.find("timed round") != std::string::npos || where.find("after timing") != std::string::npos));
}

// Wrong only when a benchmark-size call's x differs from the previous one's in `condition` (a count of
// changed elements, `changed`, of n): the timed rounds change a block of about 1 % between calls (a fresh
// runner process starts each block with nothing seen), the check after timing installs a new set whole.
std::string wrong_when_changed(const std::string& condition) {
  return axpy_kernel(
      "bool wrong = false;\n"
      "if (n == 4096) {\n"
      "  int64_t changed = 0;\n"
      "  for (int64_t i = 0; i < n; ++i) changed += x[i] != prev[i];\n"
      "  wrong = seen && (" +
          condition +
          ");\n"
          "  std::memcpy(prev, x, sizeof prev);\n"
          "  seen = true;\n"
          "}\n" +
          kCorrect + "\nif (wrong) y[7] += 1.0f;",
      "static float prev[4096]; static bool seen = false;");
}

TEST_CASE("a kernel wrong only on the inputs of the check after timing is caught by that check", "[eval]") {
  auto r = run("wrong_after_timing", wrong_when_changed("changed > n / 2"), quick(true));
  CHECK(r.status == status::kMismatch);
  REQUIRE_FALSE(r.correctness.first_mismatches.empty());
  INFO(r.correctness.first_mismatches[0]);
  CHECK(r.correctness.first_mismatches[0].find("after timing") != std::string::npos);
}

TEST_CASE("a kernel wrong only on the timed rounds' changed inputs is caught by a timed round's check", "[eval]") {
  auto r = run("wrong_while_timed", wrong_when_changed("changed > 0 && changed <= n / 10"), quick(true));
  CHECK(r.status == status::kMismatch);
  REQUIRE_FALSE(r.correctness.first_mismatches.empty());
  INFO(r.correctness.first_mismatches[0]);
  CHECK(r.correctness.first_mismatches[0].find(", timed round ") != std::string::npos);
  CHECK(r.correctness.first_mismatches[0].find("after timing") == std::string::npos);
}

TEST_CASE("a kernel returning non-zero is a failed result with a message", "[eval]") {
  auto r = run("returns_error", axpy_kernel("if (n == 17) return 7;\n" + kCorrect));
  CHECK(r.status == status::kCrashed);
  CHECK(r.message == "failed: kiln_entry returned 7 (N=17 seed 0)");
}

TEST_CASE("a kernel that changes a tensor descriptor has the wrong shape", "[eval]") {
  auto r = run("changes_shape", axpy_kernel(kCorrect + "\n a->outputs[0].shape[0] = 1;"));
  CHECK(r.status == status::kWrongShape);
}

TEST_CASE("fp16 and fp64 tensors are generated and compared", "[eval]") {
  for (DType dt : {DType::kF16, DType::kF64}) {
    TaskSpec spec = axpy_task();
    spec.scalars.clear();
    for (auto* group : {&spec.inputs, &spec.outputs}) {
      for (auto& t : *group) t.dtype = dt;
    }
    spec.rtol = 1e-2;
    spec.atol = 1e-2;
    const std::string type = dt == DType::kF64 ? "double" : "uint16_t";
    // The reference and the candidate both copy x to y, bit for bit.
    spec.inputs[1].init = InitKind::kZeros;
    const std::string copy =
        "std::memcpy(a->outputs[0].data, a->inputs[0].data, a->inputs[0].shape[0] * sizeof(" + type + "));";
    auto ref = KernelLibrary::open(build_kernel("copy_" + type, axpy_kernel(copy)));
    auto bad = KernelLibrary::open(build_kernel(
        "copy_off_" + type, axpy_kernel(copy + "\n std::memset(a->outputs[0].data, 0x3c, sizeof(" + type + "));")));
    REQUIRE(ref.is_ok());
    REQUIRE(bad.is_ok());
    auto ok = kiln::eval::evaluate(spec, ref->entry(), ref->entry(), quick());
    REQUIRE(ok.is_ok());
    CHECK(ok->status == status::kOk);
    auto wrong = kiln::eval::evaluate(spec, bad->entry(), ref->entry(), quick());
    REQUIRE(wrong.is_ok());
    CHECK(wrong->status != status::kOk);
  }
}

TEST_CASE("tasks this evaluator cannot run are errors, not verdicts", "[eval]") {
  auto ref = KernelLibrary::open(build_kernel("reference", axpy_kernel(kCorrect)));
  REQUIRE(ref.is_ok());
  TaskSpec spec = axpy_task();
  spec.baselines = {"mystery_blas"};
  auto r = kiln::eval::evaluate(spec, ref->entry(), ref->entry(), quick());
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().message().find("unknown baseline 'mystery_blas'") != std::string::npos);
  CHECK(kiln::eval::is_known_baseline("openblas_sgemm"));

  spec = axpy_task();
  spec.correctness_cases = {{{"M", 3}}};
  CHECK_FALSE(kiln::eval::evaluate(spec, ref->entry(), ref->entry(), quick()).is_ok());
}

TEST_CASE("a library without kiln_entry does not load", "[eval]") {
  std::string path = build_kernel("no_entry", "extern \"C\" int something_else() { return 0; }\n");
  REQUIRE(!path.empty());
  auto lib = KernelLibrary::open(path);
  REQUIRE_FALSE(lib.is_ok());
  CHECK(lib.status().message().find("no kiln_entry") != std::string::npos);
  CHECK_FALSE(KernelLibrary::open("/nonexistent/k.so").is_ok());
}
