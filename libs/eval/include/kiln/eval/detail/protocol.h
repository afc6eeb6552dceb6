// The parts of the evaluation protocol (DESIGN §5) that do not depend on where tensors live: what
// correctness found and the verdict drawn from it, the scalars passed by name, the nvbench-style stopping
// rule of the timing loop and the summary of one timed case. detail/: shared by the CPU evaluator and the
// CUDA one in libs/cuda, not an API for anyone else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/eval/detail/tensor.h"
#include "kiln/eval/eval.h"
#include "kiln/proto/payloads.h"
#include "kiln/task/task.h"

namespace kiln::eval::detail {

inline constexpr size_t kMaxListedMismatches = 5;
// Inputs of the timing runs and of the check after timing come from seeds no correctness seed uses.
inline constexpr uint64_t kTimingSeed = 0x7155'0001;
inline constexpr uint64_t kRecheckSeed = 0x7155'0002;

// The task's scalars as the kernel ABI passes them: parallel arrays of names and values.
struct Scalars {
  std::vector<const char*> names;
  std::vector<double> values;
  explicit Scalars(const task::TaskSpec& spec);
};

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

// "kiln_entry returned 3 (B=1,H=4096 seed 0)"
std::string call_failure(int rc, const std::string& context);

// The status and one-line message DESIGN §6 scores from, worst finding first, and the correctness block.
void conclude(const Findings& f, proto::TestReport& report);

// "1.23x"
std::string format_ratio(double x);

// When to stop sampling (nvbench's rule): at least min_samples and min_time_s, then when the noise is
// under max_noise, when it stopped improving over several checkpoints, or at max_time_s.
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

}  // namespace kiln::eval::detail
