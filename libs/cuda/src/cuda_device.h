// The CUDA device of the evaluation protocol (kiln/eval/device.h). Every contestant (candidate,
// reference, each baseline) runs in a runner process with a CUDA context of its own, forked before the
// evaluator touches CUDA; the evaluator owns device arenas per contestant, shared with that runner alone
// through CUDA IPC, and uploads, perturbs and reads the tensors there. A call is timed from continuing the
// stopped runner to its answer (it synchronizes its whole device first) plus a probe of the device from the
// evaluator's context; the runner's own CUDA events are used when they agree with that clock, and the
// cost of an empty call (the reference runner's second entry) is subtracted from every contestant alike. Internal to
// libs/cuda.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/eval/device.h"
#include "kiln/eval/runner.h"

namespace kiln::cuda {

// Device bytes each of a contestant's arenas holds: the largest case with the placement slack, rounded up
// to whole 2 MiB (what the runners map through CUDA IPC reads at one speed only then).
Result<size_t> device_arena_bytes(const task::TaskSpec& spec);

// The order the evaluator allocates the arenas in: the contestant each allocation goes to, each of
// `contestants` appearing `arenas` times, shuffled by `seed` (one per evaluation), so that which contestant
// gets which memory changes from one evaluation to the next.
std::vector<size_t> arena_allocation_order(size_t contestants, size_t arenas, uint64_t seed);

// The runners of an evaluation: the candidate, the reference (its C kernel, with the call-overhead probe
// as its second entry, or its PyTorch module), the baselines, and last, beside a PyTorch reference, the
// probe in a C runner of its own.
Result<std::vector<eval::RunnerKernel>> runner_kernels(const task::TaskSpec& spec, const eval::Candidate& candidate,
                                                       const eval::Candidate& reference, const std::string& python);

class CudaDevice final : public eval::Device {
 public:
  // Forks the runners, creates this process's context, the arenas, and hands each runner its own.
  static Result<std::unique_ptr<CudaDevice>> start(const task::TaskSpec& spec, const eval::Candidate& candidate,
                                                   const eval::Candidate& reference, const eval::EvalOptions& options);
  ~CudaDevice() override;
  // Where start() spent its time, in order: ("fork", s), ("context", s), ("arenas", s), ("runners", s).
  const std::vector<std::pair<std::string, double>>& start_phases() const;

  const char* log_prefix() const override { return "kiln-eval-cuda"; }
  std::string timing_method() const override;
  double reproducibility_us(double median_us) const override;
  std::string candidate_load_failure() const override;
  Status check_started() const override;
  int candidate_pid() const override;

  Status load(size_t who, const eval::TensorSet& tensors) override;
  Status load_block(size_t who, const eval::TensorSet& shapes) override;
  Status read(size_t who, eval::TensorSet& into, bool inputs_too) override;
  Result<Call> call(size_t who, CallKind kind) override;

  Result<bool> compare_outputs(size_t got, size_t expected, double rtol, double atol,
                               std::vector<eval::Comparison>& per_output) override;

  Status check_case(const eval::TensorSet& shapes) override;
  Status begin_timing(const task::TaskSpec& spec, const eval::TensorSet& shapes, uint64_t first_seed,
                      uint64_t donor_seed) override;
  Result<Block> begin_block(uint64_t block) override;
  Status perturb(size_t who, const std::vector<eval::PerturbBlock>& blocks) override;
  std::string placement(size_t who) const override;
  int placement_group(size_t who) const override;
  Status begin_rounds() override;
  Status end_timing(std::vector<std::vector<double>>& samples, std::string& note) override;
  Status load_donor(size_t who, const eval::TensorSet& shapes, int variant) override;
  Result<bool> inputs_are_donor(size_t who) override;
  Status read_donor(eval::TensorSet& into) override;

 private:
  struct State;
  explicit CudaDevice(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace kiln::cuda
