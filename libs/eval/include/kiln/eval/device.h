// The evaluation protocol of DESIGN §5 (correctness, interleaved timing with inputs that move, the check
// after timing, the verdict) is written once, in run_protocol(), against Device: where the contestants'
// tensors live and how their calls run. libs/eval implements it for the CPU (cpu_device.cc), libs/cuda for
// a GPU. Every defence of the protocol therefore holds on both backends by construction; a device only
// decides how a tensor gets to its contestant and how a call is clocked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/eval/eval.h"
#include "kiln/eval/tensor.h"
#include "kiln/proto/payloads.h"
#include "kiln/task/task.h"

namespace kiln::eval {

// Inputs of correctness come from seeds 0..seeds-1; the timing runs and the check after timing from
// seeds no correctness seed uses.
inline constexpr uint64_t kTimingSeed = 0x7155'0001;
inline constexpr uint64_t kRecheckSeed = 0x7155'0002;

// The tensors of one case on the host: what a kernel reads and writes, or, for a device, the values to
// load and what came back.
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
// `input` are replaced by elements [source, source + len) of a second input set (kRecheckSeed), the
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

// Tensors shaped like these, their values unset (the pages untouched until written).
std::vector<HostTensor> unfilled_like(const std::vector<HostTensor>& tensors);
TensorSet unfilled_like(const TensorSet& set);

// The timing tensors of a device that keeps them on the host (the CPU device): what begin_timing() draws,
// perturbed as perturb() says.
struct HostTimingSets {
  TensorSet first;  // inputs from the first seed as perturbed so far; outputs poisoned (variant 0)
  TensorSet donor;  // inputs from the donor seed
  void draw(const task::TaskSpec& spec, const TensorSet& shapes, uint64_t first_seed, uint64_t donor_seed);
  // Copies `blocks` of the donor's inputs into `set`'s (and first's, with `set` = first).
  void perturb(TensorSet& set, const std::vector<PerturbBlock>& blocks) const;
  // The donor's inputs (a copy) and outputs shaped like `shapes`' poisoned the `variant` way.
  TensorSet donor_set(const TensorSet& shapes, int variant) const;
};

// The task's scalars as the kernel ABI passes them: parallel arrays of names and values.
struct Scalars {
  std::vector<const char*> names;
  std::vector<double> values;
  explicit Scalars(const task::TaskSpec& spec);
};

// Where the contestants of one evaluation live and run. Contestant 0 is the candidate, 1 the reference,
// 2.. the task's baselines; each has its own copy of the tensors of the case at hand, and only the
// candidate is untrusted: a failure of any other is the evaluator's (an error, never the candidate's
// verdict).
class Device {
 public:
  enum class CallKind {
    kCheck,   // correctness and the checks around timing: not clocked
    kWarmUp,  // before timing: clocked, thrown away
    kTimed,   // a sample (cold mode: the caches are flushed first, off the clock)
  };
  struct Call {
    int rc = 0;                        // kiln_entry's code
    std::string device_error;          // a device error raised by the call ("cudaErrorIllegalAddress")
    std::string death;                 // the contestant's runner died ("SIGSEGV")
    bool descriptors_changed = false;  // the kernel wrote to the descriptors it was given
    double sample_us = 0;              // kTimed: the sample as the stopping rule sees it
    bool ok() const { return rc == 0 && device_error.empty() && death.empty(); }
    std::string what() const;  // "SIGSEGV", "CUDA error ...", "kiln_entry returned 3"
  };

  virtual ~Device() = default;

  size_t contestants() const { return names_.size(); }
  const std::string& name(size_t who) const { return names_[who]; }
  // The protocol's log lines ("kiln-eval-cuda: 4096x4096: ...") go to stderr with this prefix.
  virtual const char* log_prefix() const = 0;
  // "host_clock", "cuda_events_checked": how the samples of this evaluation were clocked (asked last).
  virtual std::string timing_method() const = 0;
  // How far a contestant's median time may move between evaluations of the same code on this device,
  // beyond what the samples of one evaluation show (measured with A/A runs: the same kernel as candidate
  // and reference in separate evaluations). The speedup interval is widened by it, so that it owns up to
  // the offsets an evaluation cannot see from inside.
  virtual double reproducibility_us(double /*median_us*/) const { return 0; }

  // Why the candidate could not be loaded (its fault: the verdict is load_failed), else empty.
  virtual std::string candidate_load_failure() const = 0;
  // Whether every contestant is ready; an error names the contestant whose set-up failed (the
  // evaluator's fault, whichever it is).
  virtual Status check_started() const = 0;
  // The process the candidate runs in (a profiler attaches to it).
  virtual int candidate_pid() const = 0;

  // Puts `tensors` where contestant `who` reads and writes them (at the current placement).
  virtual Status load(size_t who, const TensorSet& tensors) = 0;
  // The load at the start of a timing block: the case's timing inputs as perturb() has left them and
  // poisoned outputs, from the device's own copy (begin_timing() drew it); `shapes` are the case's tensors,
  // their values unset. (A GPU copies device to device instead of moving the case over the bus.)
  virtual Status load_block(size_t who, const TensorSet& shapes) = 0;
  // What contestant `who`'s calls left there: the outputs, and the inputs when `inputs_too`.
  virtual Status read(size_t who, TensorSet& into, bool inputs_too) = 0;
  // One call of contestant `who` on its tensors. An error only for trouble on the evaluator's side: what
  // the call itself did is in the Call.
  virtual Result<Call> call(size_t who, CallKind kind) = 0;

  // Where `got`'s outputs differ from `expected`'s, compared where they are instead of read back: per
  // output, what compare() would add to a Comparison (every count and maximum, no listed lines). False when
  // this device cannot (the protocol then reads them back and compares on the host, as it also does to
  // list the mismatches of outputs that differ).
  virtual Result<bool> compare_outputs(size_t /*got*/, size_t /*expected*/, double /*rtol*/, double /*atol*/,
                                       std::vector<Comparison>& /*per_output*/) {
    return false;
  }

  // Timing of one benchmark case. Whether the baselines can run the case's tensors (`shapes`: values unset).
  virtual Status check_case(const TensorSet& shapes) = 0;
  // Before the case's timing, with the device held shared (what it does overlaps no other slot's timing,
  // and waits for none): the device draws the case's inputs where it keeps them, as fill_inputs() draws
  // them, twice: from `first_seed`, what the first block loads (load_block()), and from `donor_seed`, the
  // second set perturb() copies from and the check after timing's inputs (load_donor()). On a GPU neither
  // set exists on the host, which for a case of hundreds of MiB saves drawing them there and sending them
  // over the bus.
  virtual Status begin_timing(const task::TaskSpec& spec, const TensorSet& shapes, uint64_t first_seed,
                              uint64_t donor_seed) = 0;
  // Block `block` of rounds starts (block 0 before the warm-up): the device may move every contestant's
  // tensors (the protocol loads them again right after) and may give contestants fresh processes, which
  // the protocol then warms up again. Returns whether it did; a candidate that died starting is
  // `candidate_death`.
  struct Block {
    bool fresh = false;
    std::string candidate_death;
  };
  virtual Result<Block> begin_block(uint64_t block) = 0;
  // Where contestant `who`'s tensors sit in the current block, in a few words for the log ("arena 2
  // +40 KiB"); empty where the device does not say.
  virtual std::string placement(size_t /*who*/) const { return {}; }
  // Which of the device's separate allocations contestant `who`'s tensors sit in, in the current block
  // (CUDA: the arena). A kernel can run at another speed in another one (other physical memory), as it
  // would in another process: the interval owns up to the spread between them (detail::group_spread).
  virtual int placement_group(size_t /*who*/) const { return 0; }
  // Copies `blocks[i]` of donor input i into input i of contestant `who`, or of the device's own copy
  // that load_block() loads from (`who` kOwnCopy). The protocol perturbs its own copy when a round starts
  // and each contestant right before its timed call of the round: every timed call follows a copy into
  // its own inputs alike, and the untimed calls that settle a contestant before its timed call
  // (TimingOptions::settle_calls) run on the previous round's inputs, so a result kept from them is stale.
  static constexpr size_t kOwnCopy = ~size_t{0};
  virtual Status perturb(size_t who, const std::vector<PerturbBlock>& blocks) = 0;
  // After the warm-up, before the first timed round.
  virtual Status begin_rounds() { return Status::ok(); }
  // After the last round: `samples` (per contestant, as call() gave them) may be replaced by the device's
  // final account of them; `note` goes to the log line of the case. Contestants go back to the placement
  // and processes of correctness.
  virtual Status end_timing(std::vector<std::vector<double>>& samples, std::string& note) = 0;

  // The check after timing (after end_timing()): contestant `who` gets the donor's inputs as begin_timing()
  // drew them (unperturbed) and outputs poisoned the `variant` way.
  virtual Status load_donor(size_t who, const TensorSet& shapes, int variant) = 0;
  // Whether contestant `who`'s inputs are still the donor's, byte for byte (compared where they are).
  virtual Result<bool> inputs_are_donor(size_t who) = 0;
  // The donor's inputs (into.inputs, shaped like them), to say what changed when they are not.
  virtual Status read_donor(TensorSet& into) = 0;

 protected:
  std::vector<std::string> names_;  // set by the device when it starts its contestants
};

// DESIGN §5 on `device`: correctness on every correctness case and seed, then (options.measure) every
// benchmark case timed, each followed by a check on fresh inputs; the verdict and its one-line message. An
// error means the task cannot be evaluated here (a failing reference, an unusable baseline), never that
// the candidate is wrong.
// options.profile_run instead: one call of the candidate on the first benchmark case, nothing else (for a
// profiler watching the candidate's process, metadata profile_pid and profile_case).
Result<proto::TestReport> run_protocol(const task::TaskSpec& spec, Device& device, const EvalOptions& options);

// The timing mode is cold or warm.
Status check_timing_options(const EvalOptions& options);

}  // namespace kiln::eval
