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

// The tensors of one case on the host: what a kernel reads and writes (or, for a device, the values to
// upload and what came back).
struct TensorSet {
  std::vector<HostTensor> inputs;
  std::vector<HostTensor> outputs;
};

// The task's tensors at `dims`, unfilled; an error for a shape that cannot be resolved.
Result<TensorSet> allocate(const task::TaskSpec& spec, const task::Dims& dims);
// The bytes the tensors of the largest case take when each starts on `alignment` (at least one
// alignment unit each).
Result<size_t> largest_case_bytes(const task::TaskSpec& spec, size_t alignment);
// Inputs from `init` drawn from seed (each input its own stream).
void fill_inputs(const task::TaskSpec& spec, TensorSet& set, uint64_t seed);
void poison_outputs(TensorSet& set, int variant);

// Inputs that move while timed. Before timing round `round`, elements [first, first + len) of input
// `input` are replaced by elements [source, source + len) of a second input set (kTimingSeed + 1), the
// same for every contestant; at most 1 % of the tensor and at least 16 elements, at a place no kernel can
// predict from earlier rounds. The source moves too: copied from the same place every time, the inputs
// would converge to the second set after a few hundred rounds and stop moving, and a cache keyed on a
// few sampled values would then be right every time.
struct PerturbBlock {
  size_t first = 0;
  size_t len = 0;
  size_t source = 0;
};
PerturbBlock perturb_block(size_t elements, uint64_t round, size_t input);
// Whether the candidate's timed outputs are compared with the reference's after round `round` (about one
// round in four, unpredictably; the last round always is).
bool compare_after_round(uint64_t round);

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

// Adds the differences of every output of `got` against `expected` to f.cmp.
void compare_outputs(const task::TaskSpec& spec, const TensorSet& got, const TensorSet& expected,
                     const std::string& context, Findings& f);
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

}  // namespace kiln::eval::detail
