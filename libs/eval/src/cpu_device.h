// The CPU device of the evaluation protocol (kiln/eval/device.h): every contestant in a runner process
// (kiln/eval/runner.h) whose tensors the evaluator keeps and stages into the runner's arena for each call;
// the clock is the evaluator's. Internal to libs/eval.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/eval/device.h"
#include "kiln/eval/runner.h"

namespace kiln::eval {

class CacheFlusher;
class Invoker;

class CpuDevice final : public Device {
 public:
  // Forks a runner per contestant (candidate, reference, each of the task's baselines) before anything
  // runs here.
  static Result<std::unique_ptr<CpuDevice>> start(const task::TaskSpec& spec, const Candidate& candidate,
                                                  KernelEntry reference, const EvalOptions& options);
  ~CpuDevice() override;

  const char* log_prefix() const override { return "kiln-eval"; }
  std::string timing_method() const override { return "host_clock"; }
  std::string candidate_load_failure() const override;
  Status check_started() const override;
  int candidate_pid() const override { return runners_[0]->pid(); }

  Status load(size_t who, const TensorSet& tensors) override;
  Status read(size_t who, TensorSet& into, bool inputs_too) override;
  // The timed outputs compared where they already are (the evaluator's copies of what the runners left),
  // without reading them into other buffers first.
  Result<bool> compare_outputs(size_t got, size_t expected, double rtol, double atol,
                               std::vector<Comparison>& per_output) override;
  Result<Call> call(size_t who, CallKind kind) override;

  Status load_block(size_t who, const TensorSet& shapes) override;
  Status check_case(const TensorSet& shapes) override;
  Status begin_timing(const task::TaskSpec& spec, const TensorSet& shapes, uint64_t first_seed,
                      uint64_t donor_seed) override;
  Result<Block> begin_block(uint64_t block) override;
  Status perturb(size_t who, const std::vector<PerturbBlock>& blocks) override;
  Status end_timing(std::vector<std::vector<double>>& samples, std::string& note) override;
  Status load_donor(size_t who, const TensorSet& shapes, int variant) override;
  Result<bool> inputs_are_donor(size_t who) override;
  Status read_donor(TensorSet& into) override;

 private:
  CpuDevice(const task::TaskSpec& spec, const EvalOptions& options);
  // `tensors` become contestant `who`'s (load(), load_donor()).
  void install(size_t who, TensorSet tensors);

  // The tensors of one contestant as the evaluator keeps them, and their kiln_args.
  struct Slot {
    TensorSet tensors;
    std::unique_ptr<Invoker> invoker;
  };

  const Scalars scalars_;
  std::vector<RunnerKernel> kernels_;
  std::function<Result<Runner::Runners>()> start_runners_;
  Runner::Runners runners_;     // the runners of correctness and of the first timing block
  Runner::Runners generation_;  // fresh runners of a later timing block
  std::vector<Runner*> current_;
  std::vector<Slot> slots_;
  HostTimingSets timing_;                  // the case being timed: its first block's tensors and its donor
  std::unique_ptr<CacheFlusher> flusher_;  // cold mode
};

}  // namespace kiln::eval
