// Each contestant of a CPU evaluation (the candidate, the reference, every baseline) runs in a runner: a
// process forked from the evaluator before any kernel runs, confined (no new processes, signals to itself
// only), holding nothing but its own shared-memory arena. The evaluator never loads the candidate; it owns
// the tensors, the clock, the comparison and the report (docs/threat-model.md). Internal to libs/eval.
//
// One call: the evaluator copies the tensors and descriptors into the runner's arena while the runner is
// stopped (it is stopped between its calls, so none of its threads run while another contestant is timed
// or while its outputs are read), rings a doorbell in the arena, continues the runner and waits for the
// answer (spinning, then asleep on a futex in the arena). The runner stops itself right after answering; the evaluator waits until it is stopped and
// copies inputs, outputs and descriptors back, so the checks of the in-process protocol apply unchanged.
// A sample is the wall time from continue to answer plus the CPU time the runner's threads used from the
// answer to the stop: nothing a kernel leaves running after it returns is off the clock.
#pragma once

#include <sys/types.h>
#include <time.h>

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "baselines.h"
#include "kiln/core/status.h"
#include "kiln/eval/eval.h"

namespace kiln::eval::detail {

struct RunnerKernel {
  std::string name;                    // "candidate", "reference", a baseline's name
  KernelEntry entry = nullptr;         // a function of this process (the trusted reference, tests) ...
  std::string library;                 // ... or a shared object the runner loads once confined ...
  const Baseline* baseline = nullptr;  // ... or a vendor baseline
};

// How a runner call ended when it did not return: the runner process died or could not load its kernel.
struct RunnerDeath {
  std::string what;  // "SIGSEGV", "exited with code 0", "cannot load ...: ..."
  bool load_failed = false;
};

class Runner {
 public:
  // Forks one runner per kernel, each with an arena of `arena_bytes`, and waits until every one has
  // loaded its kernel and stopped. `wipe` lists memory of this process the runners must not keep (they
  // zero their copy before loading anything). Must be called before this process runs any kernel.
  static Result<std::vector<std::unique_ptr<Runner>>> start(const std::vector<RunnerKernel>& kernels,
                                                            size_t arena_bytes,
                                                            const std::vector<std::pair<void*, size_t>>& wipe);
  ~Runner();  // SIGKILLs and reaps the process, unmaps the arena
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  const std::string& name() const { return name_; }
  // Set once the process has died; every later call fails the same way.
  const RunnerDeath* death() const { return dead_ ? &death_ : nullptr; }

  // A whole call: stage, invoke, freeze, unstage. Returns kiln_entry's code; an error when the runner
  // died (death() says how) or the tensors do not fit the arena.
  Result<int> call(kiln_args& args);

  // The steps of call(), for the timing loop (which flushes the cache between stage and invoke).
  Status stage(const kiln_args& args);
  // Moves where stage() puts the tensors by `bytes` (a multiple of 64, at most kPlacementSlack): other
  // pages, other cache sets. The timing loop moves every contestant between blocks of rounds.
  void set_placement(size_t bytes) { placement_ = bytes; }
  // Rings, continues the runner and waits; `elapsed_us` is continue to answer on the evaluator's clock.
  Result<int> invoke(double* elapsed_us);
  // Stops the runner (it also stops itself once the call returns) and waits until it is stopped.
  Status freeze();
  // CPU time the runner's threads used between its answer and the stop: work a kernel left running on a
  // thread after returning. The timing loop charges it to the call.
  double after_return_cpu_us() const { return after_return_cpu_us_; }
  void unstage(kiln_args& args);

 private:
  struct Slot {
    void* original = nullptr;  // the evaluator's buffer
    size_t offset = 0;         // in the arena
    size_t bytes = 0;
  };
  Runner() = default;
  Status died(int wait_status);
  Status check_alive();

  double cpu_now_us() const;

  std::string name_;
  pid_t pid_ = -1;
  clockid_t cpu_clock_ = CLOCK_MONOTONIC;  // the runner's process CPU clock
  bool has_cpu_clock_ = false;
  double cpu_at_answer_us_ = 0;
  double after_return_cpu_us_ = 0;
  void* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  uint32_t seq_ = 0;
  size_t placement_ = 0;
  bool stopped_ = false;
  bool dead_ = false;
  RunnerDeath death_;
  std::vector<Slot> in_slots_, out_slots_;
};

// How far set_placement() may move the tensors.
inline constexpr size_t kPlacementSlack = 64 * 4096;

// Arena bytes that hold the tensors of every case of the task (plus the control block and the slack).
Result<size_t> arena_bytes_for(const task::TaskSpec& spec);

}  // namespace kiln::eval::detail
