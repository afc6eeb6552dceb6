// The backend-independent parts of the evaluation protocol that the CPU and CUDA evaluators share.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "kiln/eval/detail/protocol.h"
#include "kiln/eval/device.h"
#include "kiln/testing/test_status.h"

using kiln::eval::TimingOptions;
using kiln::eval::detail::Findings;
using kiln::eval::detail::StoppingRule;

TEST_CASE("the stopping rule waits for min samples and min time, then stops on low noise", "[eval][timing]") {
  TimingOptions o;
  o.min_samples = 10;
  o.min_time_s = 0.5;
  o.max_time_s = 15;
  o.max_noise = 0.005;
  StoppingRule rule(o);
  CHECK(rule.after_round(5, 0.6, 0.001).empty());   // too few samples
  CHECK(rule.after_round(20, 0.3, 0.001).empty());  // too little time
  CHECK(rule.after_round(21, 0.9, 0.001) == "noise");
}

TEST_CASE("the stopping rule gives up when the noise stops improving, or at max_time", "[eval][timing]") {
  TimingOptions o;
  o.min_samples = 1;
  o.min_time_s = 0.1;
  o.max_time_s = 100;
  StoppingRule rule(o);
  std::string reason;
  double t = 0;
  for (int64_t n = 1; n < 1000 && reason.empty(); ++n) {
    t += 0.1;
    reason = rule.after_round(n, t, 0.05);  // noisy and flat
  }
  CHECK(reason == "stalled");
  StoppingRule capped(o);
  CHECK(capped.after_round(3, 100.0, 0.5) == "max_time");
}

TEST_CASE("the stopping rule does not call the noise stalled on a few slow rounds", "[eval][timing]") {
  TimingOptions o;
  o.min_samples = 10;
  o.min_time_s = 0.5;
  o.max_time_s = 100;
  StoppingRule rule(o);
  std::string reason;
  int64_t n = 0;
  for (double t = 0.2; reason.empty(); t += 0.2) reason = rule.after_round(++n, t, 0.3);  // one round per checkpoint
  CHECK(reason == "stalled");
  // Every checkpoint after the first waited for ten new rounds: six checkpoints, five of them stalled.
  CHECK(n >= 1 + 5 * 10);
}

TEST_CASE("the verdict takes the worst finding first", "[eval]") {
  Findings f;
  f.cmp.mismatches = 3;
  f.modified_input = "input 'x' was modified (case)";
  kiln::proto::TestReport r;
  kiln::eval::detail::conclude(f, r);
  CHECK(r.status == kiln::proto::TestStatus::kInputModified);
  f.failed_call = "CUDA error cudaErrorIllegalAddress (an illegal memory access was encountered)";
  kiln::eval::detail::conclude(f, r);
  CHECK(r.status == kiln::proto::TestStatus::kCrashed);
  CHECK(r.message.find("cudaErrorIllegalAddress") != std::string::npos);
  CHECK_FALSE(r.correctness.passed);
}

TEST_CASE("a case summary carries the speedup and its interval", "[eval][timing]") {
  std::vector<double> cand(40, 10.0), ref(40, 20.0);
  for (size_t i = 0; i < cand.size(); ++i) {
    cand[i] += 0.01 * static_cast<double>(i % 7);
    ref[i] += 0.02 * static_cast<double>(i % 5);
  }
  auto t = kiln::eval::detail::summarize_case({{"N", 4}}, cand, ref, {{"vendor", ref}}, 1, 3, "noise");
  CHECK(t.speedup == Approx(2.0).epsilon(0.01));
  CHECK(t.speedup_lo <= t.speedup);
  CHECK(t.speedup_hi >= t.speedup);
  REQUIRE(t.baselines.size() == 1);
  CHECK(t.baselines[0].speedup == Approx(2.0).epsilon(0.01));
  CHECK(t.stop_reason == "noise");
  CHECK(t.dims.at("N") == 4);
}

TEST_CASE("inputs that move while timed keep moving after thousands of rounds", "[eval][timing]") {
  // Copied from the same place every time, the inputs converged to the second input set after a few
  // hundred rounds, and a cache keyed on sampled values was then always right.
  constexpr size_t n = 100000;
  std::vector<float> input(n, 0.f), donor(n);
  for (size_t i = 0; i < n; ++i) donor[i] = static_cast<float>(i + 1);
  int moved_late = 0;
  for (uint64_t round = 0; round < 3000; ++round) {
    const auto b = kiln::eval::perturb_block(n, round, 0);
    REQUIRE(b.len == n / 100);
    REQUIRE(b.first + b.len <= n);
    REQUIRE(b.source + b.len <= n);
    bool changed = false;
    for (size_t k = 0; k < b.len; ++k) {
      changed = changed || input[b.first + k] != donor[b.source + k];
      input[b.first + k] = donor[b.source + k];
    }
    if (round >= 2900) moved_late += changed;
  }
  CHECK(moved_late == 100);
}

TEST_CASE("an interval widened for reproducibility moves each bound by the worse offset of both medians", "[eval]") {
  kiln::proto::CaseTiming t;
  t.candidate.median_us = 100;
  t.reference.median_us = 400;
  t.speedup = 4;
  t.speedup_lo = 3.9;
  t.speedup_hi = 4.1;
  kiln::eval::detail::widen_interval(t, 5, 4);
  CHECK(t.speedup == 4);
  CHECK(t.speedup_lo == Approx(3.9 * (1 - 4.0 / 400) / (1 + 5.0 / 100)));
  CHECK(t.speedup_hi == Approx(4.1 * (1 + 4.0 / 400) / (1 - 5.0 / 100)));
  // An offset as large as the candidate's time cannot make the upper bound infinite.
  kiln::eval::detail::widen_interval(t, 1000, 0);
  CHECK(std::isfinite(t.speedup_hi));
  kiln::proto::CaseTiming same = t;
  kiln::eval::detail::widen_interval(same, 0, 0);
  CHECK(same.speedup_lo == t.speedup_lo);
  CHECK(same.speedup_hi == t.speedup_hi);
}

TEST_CASE("a host device's timing sets: drawn as fill_inputs draws them, perturbed alike, the donor unmoved",
          "[eval][timing]") {
  using kiln::task::DType;
  using kiln::task::InitKind;
  kiln::task::TaskSpec spec;
  spec.inputs = {{"x", DType::kF32, {"N"}, InitKind::kNormal, 0, 1}, {"k", DType::kI32, {"N"}, InitKind::kInt, 0, 9}};
  spec.outputs = {{"y", DType::kF32, {"N"}, InitKind::kZeros, 0, 0}};
  auto shapes = kiln::eval::allocate(spec, {{"N", 5000}});
  REQUIRE(shapes.is_ok());
  kiln::eval::HostTimingSets sets;
  sets.draw(spec, *shapes, 11, 22);
  for (const auto& [seed, drawn] : {std::pair{uint64_t{11}, &sets.first}, std::pair{uint64_t{22}, &sets.donor}}) {
    kiln::eval::TensorSet want = kiln::eval::unfilled_like(*shapes);
    kiln::eval::fill_inputs(spec, want, seed);
    for (size_t i = 0; i < want.inputs.size(); ++i) CHECK(drawn->inputs[i].same_bytes(want.inputs[i]));
  }
  REQUIRE(sets.first.outputs.size() == 1);
  CHECK(std::isnan(sets.first.outputs[0].get(0)));  // poisoned
  CHECK(sets.donor.outputs.empty());

  // A block of each input copied from the donor into `first` and into a contestant's copy alike.
  kiln::eval::TensorSet contestant = sets.first;
  std::vector<kiln::eval::PerturbBlock> blocks = {{100, 50, 4000}, {7, 16, 0}};
  sets.perturb(sets.first, blocks);
  sets.perturb(contestant, blocks);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(contestant.inputs[i].same_bytes(sets.first.inputs[i]));
    for (size_t k = 0; k < blocks[i].len; ++k) {
      CHECK(sets.first.inputs[i].get(blocks[i].first + k) == sets.donor.inputs[i].get(blocks[i].source + k));
    }
  }
  // The check after timing's set: the donor's inputs as drawn, outputs poisoned the asked way.
  const kiln::eval::TensorSet check = sets.donor_set(*shapes, 1);
  kiln::eval::TensorSet want = kiln::eval::unfilled_like(*shapes);
  kiln::eval::fill_inputs(spec, want, 22);
  for (size_t i = 0; i < 2; ++i) CHECK(check.inputs[i].same_bytes(want.inputs[i]));
  REQUIRE(check.outputs.size() == 1);
  CHECK(std::isnan(check.outputs[0].get(0)));
}

TEST_CASE("the candidate's samples split by what ran right before them on the device", "[eval][timing]") {
  using kiln::eval::detail::candidate_medians_by_order;
  // Even rounds: right after the reference; odd rounds: right after the candidate's own call.
  auto order = candidate_medians_by_order({220, 130, 218, 129, 222, 131, 219});
  CHECK(order.after_reference_us == 219.5);  // 218, 219, 220, 222
  CHECK(order.after_itself_us == 130);
  order = candidate_medians_by_order({100});
  CHECK(order.after_reference_us == 100);
  CHECK(order.after_itself_us == 0);
  order = candidate_medians_by_order({});
  CHECK(order.after_reference_us == 0);
  CHECK(order.after_itself_us == 0);
}

TEST_CASE("the candidate's per-block medians span what the blocks' processes and buffers made of it",
          "[eval][timing]") {
  using kiln::eval::detail::block_median_range;
  // Three blocks: medians 130, 220, 131.
  auto range = block_median_range({129, 130, 131, 219, 220, 221, 131, 131}, {0, 3, 6});
  CHECK(range.lo_us == 130);
  CHECK(range.hi_us == 220);
  range = block_median_range({5, 7, 6}, {});  // no block starts: one block
  CHECK(range.lo_us == 6);
  CHECK(range.hi_us == 6);
  range = block_median_range({}, {0});
  CHECK(range.lo_us == 0);
  CHECK(range.hi_us == 0);
  // Each block's, in order: a block whose start is past the samples has none.
  using kiln::eval::detail::block_medians;
  CHECK(block_medians({129, 130, 131, 219, 220, 221, 131, 131}, {0, 3, 6}) == std::vector<double>{130, 220, 131});
  CHECK(block_medians({1, 2, 3}, {0, 2, 5}) == std::vector<double>{1.5, 3});
  CHECK(block_medians({}, {}).empty());
}

TEST_CASE("the spread between placement groups: from the median to the slowest and the fastest group's",
          "[eval][timing]") {
  using kiln::eval::detail::group_spread;
  // Four blocks of 3 samples, groups 0, 1, 0, 1: group 0 around 10, group 1 around 14; all: median 12.
  const std::vector<double> s{9, 10, 11, 13, 14, 15, 10, 10, 10, 14, 14, 14};
  auto a = group_spread(s, {0, 3, 6, 9}, {0, 1, 0, 1});
  CHECK(a.slower_us == Approx(14 - 12));
  CHECK(a.faster_us == Approx(12 - 10));
  // One group, or groups of one block each: nothing to say.
  a = group_spread(s, {0, 3, 6, 9}, {0, 0, 0, 0});
  CHECK(a.slower_us == 0);
  CHECK(a.faster_us == 0);
  a = group_spread(s, {0, 3, 6, 9}, {0, 1, 2, 3});
  CHECK(a.slower_us == 0);
  CHECK(a.faster_us == 0);
  // A group too small to count is left out.
  a = group_spread(s, {0, 3, 6, 9}, {0, 0, 0, 1});
  CHECK(a.slower_us == 0);
}
