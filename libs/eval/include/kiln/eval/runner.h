// Each contestant of an evaluation (the candidate, the reference, every baseline) runs in a runner: a
// process forked from the evaluator before any kernel runs, confined (no new processes, signals to itself
// only), holding nothing but its own shared-memory arena. The evaluator never loads the candidate; it owns
// the tensors, the clock, the comparison and the report (docs/threat-model.md). The CPU device (libs/eval)
// and the CUDA one (libs/cuda) start their contestants' runners through it.
//
// On a device (RunnerDevice) the tensors live in device memory the evaluator owns and shares with that
// one runner (CUDA IPC); the arena then carries only the control block, and a tensor's `data` in the
// staged descriptors is its offset in the runner's device arena.
//
// One call: the evaluator copies the tensors and descriptors into the runner's arena while the runner is
// stopped (it is stopped between its calls, so none of its threads run while another contestant is timed
// or while its outputs are read), rings a doorbell in the arena, continues the runner and waits for the
// answer (spinning, then asleep on a futex in the arena). The runner stops itself right after answering;
// the evaluator waits until it is stopped and copies inputs, outputs and descriptors back, so the checks of the
// in-process protocol apply unchanged. A sample is the wall time from continue to answer plus the CPU time the runner's
// threads used from the answer to the stop: nothing a kernel leaves running after it returns is off the clock.
#pragma once

#include <sys/types.h>
#include <time.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/eval/eval.h"

namespace kiln::eval {
namespace detail {
struct Baseline;
}

// What a runner does on a device whose memory is not the arena. Every function runs in the runner process.
struct RunnerDevice {
  // Before anything else, in parallel with the evaluator's own start (a CUDA context).
  Status (*init)() = nullptr;
  // With what the evaluator published for this runner (Runner::publish: an IPC handle of its device
  // arena), before the runner confines itself and loads its kernel. An error is a load failure.
  Status (*attach)(const void* blob, size_t bytes) = nullptr;
  // One call: `args` as staged (tensor data are offsets into the device arena). Returns kiln_entry's
  // code; a device error after it is written to `error` (and makes the call fail). `reported_us` gets the
  // call's time on the device's own clock as the runner measured it: a number the evaluator checks
  // against its own clock before it believes it (it comes from the candidate's process).
  int (*call)(KernelEntry fn, kiln_args* args, char* error, size_t error_bytes, double* reported_us) = nullptr;
};

// The elements a tensor descriptor spans (negative extents count as 0), and their bytes.
size_t tensor_elements(const kiln_tensor& t);
size_t tensor_bytes(const kiln_tensor& t);

// The most a runner's device blob may hold, and the most tensors of each kind a call may pass.
inline constexpr size_t kRunnerBlobBytes = 256;
inline constexpr int kRunnerMaxTensors = 16;

// A contestant written in Python (a PyTorch module: kiln/eval/torch_module.h). Its runner process execs
// `interpreter` (confined first, as every runner is) and runs libs/eval/python/torch_runner.py, which
// answers the same doorbells on the same arena, handed over as a file descriptor with `config` (JSON; the
// runner adds the arena's layout to it). Such a runner is always trusted code: the task's reference or
// a baseline, never the candidate.
struct PythonKernel {
  std::string interpreter;
  std::string config;
  // torch.compile runs compilers in processes of their own: such a runner is not denied process
  // creation (it stays inside the evaluator's sandbox, and non-dumpable).
  bool allow_processes = false;
};

struct RunnerKernel {
  std::string name;                            // "candidate", "reference", a baseline's name
  KernelEntry entry = nullptr;                 // a function of this process (the trusted reference, tests) ...
  std::string library;                         // ... or a shared object the runner loads once confined ...
  const detail::Baseline* baseline = nullptr;  // ... or a vendor baseline ...
  // A second entry, a function of this process (never the candidate's code), that a call staged with
  // `second_entry` runs instead: the CUDA device's call-overhead probe, in the reference's runner rather
  // than in a process (and a CUDA context) of its own.
  KernelEntry second = nullptr;
  std::shared_ptr<const PythonKernel> python;  // ... or a PyTorch module, instead of all of the above
};

// How a runner call ended when it did not return: the runner process died or could not load its kernel.
struct RunnerDeath {
  std::string what;          // "SIGSEGV", "exited with code 0", "cannot load ...: ..."
  bool load_failed = false;  // the kernel could not be loaded (its fault); false for a device set-up failure
};

class Runner {
 public:
  // Forks one runner per kernel, each with an arena of `arena_bytes`, and waits until every one has
  // loaded its kernel and stopped. Python runners go first: each has made itself non-dumpable before any
  // other runner exists (a process is dumpable right after exec, and another process of the same user
  // could open its memory then). `wipe` lists memory of this process the runners must not keep (they
  // zero their copy before loading anything). Must be called before this process runs any kernel.
  //
  // With a `device`, each runner first runs device->init(); `after_fork` runs here once every runner is
  // forked (it sets up the device and publishes each runner's blob), and then each runner attaches.
  using Runners = std::vector<std::unique_ptr<Runner>>;
  static Result<Runners> start(const std::vector<RunnerKernel>& kernels, size_t arena_bytes,
                               const std::vector<std::pair<void*, size_t>>& wipe, const RunnerDevice* device = nullptr,
                               const std::function<Status(Runners&)>& after_fork = {});
  ~Runner();  // SIGKILLs and reaps the process, unmaps the arena
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  const std::string& name() const { return name_; }
  pid_t pid() const { return pid_; }
  // Set once the process has died; every later call fails the same way.
  const RunnerDeath* death() const { return dead_ ? &death_ : nullptr; }

  // Hands the runner what its RunnerDevice::attach needs (at most kRunnerBlobBytes).
  Status publish(const void* blob, size_t bytes);
  // Whether this runner runs a Python kernel (its call's time is the one it reports: reported_us()).
  bool python() const { return python_; }
  // The device error of the last call, as the runner wrote it (untrusted text, bounded), and the time it
  // reported for it (RunnerDevice::call).
  std::string device_error() const;
  double reported_us() const;

  // A whole call: stage, invoke, freeze, unstage. Returns kiln_entry's code; an error when the runner
  // died (death() says how) or the tensors do not fit the arena.
  Result<int> call(kiln_args& args);

  // The steps of call(), for the timing loop (which flushes the cache between stage and invoke).
  // `second_entry`: the call runs the runner's RunnerKernel::second (an error where it has none).
  Status stage(const kiln_args& args, bool second_entry = false);
  // Moves where stage() puts the tensors by `bytes` (a multiple of 64, at most kPlacementSlack): other
  // pages, other cache sets. The timing loop moves every contestant between blocks of rounds.
  void set_placement(size_t bytes) { placement_ = bytes; }
  // Evicts the tensors stage() copied into the arena from every cache (cold mode). False where the CPU
  // cannot, or the tensors are on a device.
  bool evict_staged() const;
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
  // A Python runner just forked: waits until it is no longer dumpable, or failed, or died.
  void await_guard();
  Status check_alive();

  double cpu_now_us() const;

  std::string name_;
  pid_t pid_ = -1;
  clockid_t cpu_clock_ = CLOCK_MONOTONIC;  // the runner's process CPU clock
  bool has_cpu_clock_ = false;
  bool has_second_ = false;  // RunnerKernel::second was given
  double cpu_at_answer_us_ = 0;
  double after_return_cpu_us_ = 0;
  void* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  uint32_t seq_ = 0;
  size_t placement_ = 0;
  bool stopped_ = false;
  bool on_device_ = false;
  bool python_ = false;
  int arena_fd_ = -1;  // a Python runner's arena (a memfd), kept open until the runner has mapped it
  bool dead_ = false;
  RunnerDeath death_;
  std::vector<Slot> in_slots_, out_slots_;
};

// How far set_placement() may move the tensors.
inline constexpr size_t kPlacementSlack = 64 * 4096;

// What a runner can pass: at most kRunnerMaxTensors inputs and outputs each, 32 scalars, short names.
Status check_runner_limits(const task::TaskSpec& spec);

// Arena bytes that hold the tensors of every case of the task (plus the control block and the slack).
Result<size_t> arena_bytes_for(const task::TaskSpec& spec);

}  // namespace kiln::eval
