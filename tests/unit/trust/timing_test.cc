// Verdicts that rest on a timing: the A/A run (issue 3, "Done when": the reference submitted as the
// candidate, timed with the tester's default options), an honest kernel, and a candidate that calls the
// reference. This executable runs alone (RUN_SERIAL), so other tests do not share its cores.
#include <catch2/catch.hpp>
#include <string>

#include "harness.h"

using kiln::trust::Harness;
using kiln::trust::kernel_source;
using kiln::trust::kPromotionSpeedup;
using kiln::trust::promotable;
using kiln::trust::run;
using kiln::trust::Timing;
using kiln::trust::Verdict;
using status = kiln::proto::TestStatus;

namespace {

// The tester's defaults (config::TesterConfig / eval::TimingOptions).
Timing tester_defaults() {
  Timing t;
  t.mode = "cold";
  t.min_samples = 10;
  t.min_time_s = 0.5;
  t.max_time_s = 15;
  t.max_noise = 0.005;
  t.warmup = 3;
  return t;
}

kiln::proto::CaseTiming run_aa(Harness& h) {
  const std::string& reference = h.reference();
  REQUIRE_FALSE(reference.empty());
  auto v = h.evaluate(reference, tester_defaults(), 60);
  INFO(kiln::testing::status_word(v.status) << ": " << v.message);
  REQUIRE(v.status == status::kOk);
  REQUIRE(v.report.performance.cases.size() == 1);
  return v.report.performance.cases[0];
}

}  // namespace

TEST_CASE("an honest kernel passes (the battery can tell right from wrong)", "[trust]") {
  Harness h;
  Verdict v = run(h, "honest", kiln::trust::kHonestBody);
  INFO(v.message);
  CHECK(v.status == status::kOk);
  CHECK(v.report.performance.measured);
  CHECK(v.report.correctness.tested_shapes.size() == 5);
  CHECK_FALSE(promotable(v));  // as fast as the reference: nothing to promote
}

TEST_CASE("a kernel that calls the reference cannot earn a promotable speedup", "[trust]") {
  // The reference is already loaded in the evaluation process; dlopen of the same file returns it.
  Harness h;
  Verdict v = run(h, "calls_reference",
                  "using Entry = int (*)(const kiln_args*);\n"
                  "static Entry ref = nullptr;\n"
                  "if (!ref) {\n"
                  "  void* handle = dlopen(\"./reference.so\", RTLD_NOW | RTLD_NOLOAD);\n"
                  "  if (handle) ref = reinterpret_cast<Entry>(dlsym(handle, \"kiln_entry\"));\n"
                  "}\n"
                  "if (!ref) { for (int64_t i = 0; i < n; ++i) y[i] = NAN; return 0; }\n"
                  "return ref(a);",
                  "#include <dlfcn.h>", Timing{"warm", 20, 0.4, 2.0, 0.005, 3, true}, "-ldl");
  INFO(v.message);
  // It computes the right answer (the reference's), so it is correct ...
  REQUIRE(v.status == status::kOk);
  REQUIRE(v.report.performance.cases.size() == 1);
  const auto& c = v.report.performance.cases[0];
  INFO("speedup " << c.speedup << " [" << c.speedup_lo << ", " << c.speedup_hi << "]");
  // ... and exactly as fast as the reference: never promoted. (Only the interval is bound: on a machine
  // loaded 4x over its cores the point estimate of identical code was seen at 3.9x, inside [0.63x, 11.8x].)
  CHECK(c.speedup_lo < kPromotionSpeedup);
  CHECK_FALSE(promotable(v));
}

TEST_CASE("A/A: the reference against itself is never promotable and near 1.0", "[trust][aa]") {
  Harness h;
  const auto c = run_aa(h);
  INFO("speedup " << c.speedup << " [" << c.speedup_lo << ", " << c.speedup_hi << "], n " << c.candidate.n << ", cv "
                  << c.candidate.cv << "/" << c.reference.cv << ", stop " << c.stop_reason);
  CHECK(c.candidate.n >= 10);
  CHECK(c.speedup_lo <= c.speedup);
  CHECK(c.speedup <= c.speedup_hi);
  // Near 1.0 as far as the run could tell: the interval, widened by 10 % each way, holds 1.0. The upper
  // side is also the promotion rule (DESIGN §7: the lower bound must reach 1.10), which identical code
  // must never meet. A point estimate alone is not a fair bound: beside `ctest -j2` on two cores one run
  // put it at 1.26 with the interval [0.92, 1.43]. A broken clock or a one-sided bias of more than 10 %
  // past a tight interval still fails here.
  CHECK(c.speedup_lo < 1.10);
  CHECK(c.speedup_hi * 1.10 >= 1.0);
}

// A 95 % interval misses the truth in about 1 run in 20 by design, so this is a benchmark, not a test: hidden
// from ctest, run many times by bench/timing/aa_cpu.sh, which counts the runs whose interval held 1.0.
TEST_CASE("A/A: the 95 % speedup interval contains 1.0", "[.][aa_coverage]") {
  // Timing runs in generations of fresh runner processes at fresh placements and the interval resamples
  // whole generations: on this 2-core machine, kiln-eval with its defaults contained 1.0 in 55 of 60 runs
  // (before generations, resampling single pairs of one process: 35 of 40). docs/threat-model.md, hole 4.
  Harness h;
  const auto c = run_aa(h);
  INFO("speedup " << c.speedup << " [" << c.speedup_lo << ", " << c.speedup_hi << "], n " << c.candidate.n);
  CHECK(c.speedup_lo <= 1.0);
  CHECK(c.speedup_hi >= 1.0);
}
