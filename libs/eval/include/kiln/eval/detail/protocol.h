// The insides of run_protocol() (kiln/eval/device.h): what correctness found and the verdict drawn from
// it, the nvbench-style stopping rule of the timing loop and the summary of one timed case. detail/:
// libs/eval's own, named here so that its unit tests can reach them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/eval/device.h"
#include "kiln/eval/eval.h"
#include "kiln/eval/tensor.h"
#include "kiln/proto/payloads.h"
#include "kiln/task/task.h"

namespace kiln::eval::detail {

inline constexpr size_t kMaxListedMismatches = 5;
// Whether the candidate's timed outputs are compared with the reference's after round `round` (about one
// round in four, unpredictably; the last round always is).
bool compare_after_round(uint64_t round);

// Everything correctness has found so far, across cases and seeds.
struct Findings {
  Comparison cmp;
  std::string failed_call;  // a kiln_entry of the candidate returned non-zero, or (CUDA) raised an error
  std::string crashed;      // the candidate's runner process died: "SIGSEGV (N=17 seed 0)"
  std::string changed_descriptor;
  std::string modified_input;
  std::vector<std::string> tested_shapes;

  void tested(const std::string& shape);
};

// Adds the differences of every output of `got` against `expected` to f.cmp.
void compare_outputs(const task::TaskSpec& spec, const TensorSet& got, const TensorSet& expected,
                     const std::string& context, Findings& f);
// Whether comparisons found no mismatch at all (Device::compare_outputs: the host need not look again).
bool all_match(const std::vector<Comparison>& per_output);
// Records the first input of `got` that differs from `pristine`.
void check_inputs(const task::TaskSpec& spec, const TensorSet& got, const TensorSet& pristine,
                  const std::string& context, Findings& f);

// "kiln_entry returned 3 (B=1,H=4096 seed 0)"
std::string call_failure(int rc, const std::string& context);

// The status and one-line message DESIGN §6 scores from, worst finding first, and the correctness block.
void conclude(const Findings& f, proto::TestReport& report);

// "1.23x"
std::string format_ratio(double x);

// When to stop sampling (nvbench's rule): at least min_samples and min_time_s, then when the noise is
// under max_noise, when it stopped improving over several checkpoints, or at max_time_s. A checkpoint
// needs min_samples new rounds as well as time: where a round is slow (a cold cache flush, a long
// kernel), a noise estimate of a dozen samples that did not improve over a few more says nothing, and
// stopping on it left the speedup of identical code 15 % off 1.0.
class StoppingRule {
 public:
  explicit StoppingRule(const TimingOptions& options);
  // After each round of samples; `noise` is the larger CV of candidate and reference. Returns the stop
  // reason (noise | stalled | max_time), or empty to go on.
  std::string after_round(int64_t rounds, double elapsed_s, double noise);

 private:
  TimingOptions options_;
  double checkpoint_s_;
  double next_checkpoint_s_;
  int64_t next_checkpoint_rounds_ = 0;
  double best_noise_ = 1e300;
  int stalled_ = 0;
};

// The samples of one contestant of the timing loop.
struct NamedSamples {
  std::string name;
  std::vector<double> samples_us;
};

// Statistics, speedup and its bootstrap interval of one benchmark case; `baselines` may be empty.
// `block_starts`: the rounds that begin a block the interval resamples whole (see bootstrap_speedup).
proto::CaseTiming summarize_case(const task::Dims& dims, const std::vector<double>& candidate_us,
                                 const std::vector<double>& reference_us, const std::vector<NamedSamples>& baselines,
                                 uint64_t bootstrap_seed, int64_t warmup_iters, const std::string& stop_reason,
                                 const std::vector<size_t>& block_starts = {});

// The candidate's median over the rounds in which it ran right after the reference and over the others.
// The loop alternates the order inside each round (even rounds end with the candidate, odd rounds begin
// with it), so sample i followed the reference when i is even and its own call when i is odd. A gap between
// the two is the other contestant's wake on the device (clocks, power state, caches); 0 where a side has
// no sample.
struct OrderMedians {
  double after_reference_us = 0;
  double after_itself_us = 0;
};
OrderMedians candidate_medians_by_order(const std::vector<double>& candidate_us);

// The lowest and the highest of the per-block medians of `samples_us` (`block_starts`: the first sample of
// each block, ascending from 0): a block runs on its own processes and buffers, so a wide range is the
// placement's doing, not the order's. {0, 0} without samples.
struct BlockRange {
  double lo_us = 0;
  double hi_us = 0;
};
BlockRange block_median_range(const std::vector<double>& samples_us, const std::vector<size_t>& block_starts);
// Each block's median, in order (blocks without samples left out).
std::vector<double> block_medians(const std::vector<double>& samples_us, const std::vector<size_t>& block_starts);

// How much slower and how much faster than the median of all of `samples_us` a contestant could be timed
// where its tensors sit elsewhere: the distance from that median to the medians of the slowest and of the
// fastest placement group (Device::placement_group; `groups[b]` is block b's, each block's samples go to
// its group). Only groups of at least kMinGroupBlocks blocks and kMinGroupSamples samples count; {0, 0}
// with fewer than two of them.
struct Allowance {
  double slower_us = 0;
  double faster_us = 0;
};
inline constexpr size_t kMinGroupBlocks = 2;
inline constexpr size_t kMinGroupSamples = 6;
Allowance group_spread(const std::vector<double>& samples_us, const std::vector<size_t>& block_starts,
                       const std::vector<int>& groups);

// Widens t's speedup interval as if the candidate's median could be off by `candidate_us` and the
// reference's by `reference_us`, each in the worse direction: lo * (1 - r/ref) / (1 + c/cand),
// hi * (1 + r/ref) / (1 - c/cand) (that last factor at most 2).
void widen_interval(proto::CaseTiming& t, double candidate_us, double reference_us);
// Widens t's speedup interval, where it does not already, to the speedup of the medians moved by
// `candidate` and `reference`, each the worse way for the bound: lo to (ref - r.faster) / (cand +
// c.slower), hi to (ref + r.slower) / (cand - c.faster) (the candidate at least half its median). What
// another evaluation whose blocks drew other placements could measure; the block bootstrap around the
// median does not reach it when the median sits in one of two modes.
void cover_interval(proto::CaseTiming& t, const Allowance& candidate, const Allowance& reference);

}  // namespace kiln::eval::detail
