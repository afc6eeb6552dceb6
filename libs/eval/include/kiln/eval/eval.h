// The evaluation protocol of DESIGN §5 for the CPU backend: correctness of a candidate against the
// task's reference, then interleaved timing. It runs inside the sandboxed `kiln-eval` child. Every
// contestant (candidate, reference, baselines) runs in a runner process of its own, forked before any
// kernel runs and confined; the evaluator owns the tensors, the clock, the comparison and the verdict, and
// never loads the candidate (docs/threat-model.md).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/kernel_abi.h"
#include "kiln/proto/payloads.h"
#include "kiln/task/task.h"

namespace kiln::eval {

using KernelEntry = int (*)(const kiln_args*);

// nvbench-style stopping rule: at least `min_samples` and `min_time_s`, then stop when both CVs are under
// `max_noise`, when the noise stops improving, or at `max_time_s` — or, with `precision`, as soon as the
// speedup itself is known well enough.
struct TimingOptions {
  std::string mode = "cold";  // cold: flush the last-level cache before each sample | warm
  int64_t min_samples = 10;
  double min_time_s = 0.5;
  double max_time_s = 15;
  double max_noise = 0.005;
  int64_t warmup_iters = 3;
  // Screening (0: off). When > 0, a benchmark case stops being timed as soon as the candidate's speedup
  // interval at 99.5 % (widened like the final one; checked at the start of every block from the fourth
  // on) lies wholly below this: the candidate cannot reach it (the promotion bar or the campaign's best),
  // so measuring it to full precision buys nothing. Its timing then says stop_reason "screened", with the
  // interval as it stood. Never set for a confirmation.
  double screen_below = 0;
  // Precision stop (0: off). When > 0, a case also stops (stop_reason "precise") once the speedup's 95 %
  // interval from the samples (before the widening for reproducibility, which no number of samples
  // narrows; the interval reported is widened) is at most 2 * precision * speedup wide: what a measurement is
  // for is the ratio, and a CV that stays at 1 % whatever the number of samples (a GPU kernel's usually
  // does) would otherwise run every case to max_time_s. Checked at block starts, after min_samples and
  // min_time_s and from the sixth block on, at most once per sixth of the time measured so far.
  double precision = 0;
  // Settling (0: off). A contestant whose timed call would come right after a call of one at least
  // kSettleRatio times longer (the loop alternates them) first makes this many untimed calls of its own,
  // so what it is timed in is its own wake on the device, not the other one's: on an H200 a 130 us
  // streaming kernel right after a 22 ms one-block reference took 215-220 us, after itself 130-138 us.
  // The settling calls run on the round before's inputs (Device::perturb). Costs this many short calls
  // per round; a long contestant never settles.
  int64_t settle_calls = 1;
};

// Settling applies when the contestant that ran before is this many times longer (running means).
inline constexpr double kSettleRatio = 4;

struct EvalOptions {
  TimingOptions timing;
  bool measure = true;  // false: correctness only
  // A profiling run (CUDA only, under Nsight Compute): the candidate is called once on the first benchmark
  // case and nothing else runs a kernel; no verdict. The report's metadata "profile_pid" names the process
  // whose kernels are the candidate's.
  bool profile_run = false;
  uint64_t bootstrap_seed = 20240601;  // the speedup interval is reproducible for the same samples
  // The device's lock file (device_lock.h): timing holds it exclusively, every other use of the device
  // shared, so evaluation slots that share a device never measure while another uses it. Empty: no lock.
  std::string device_lock;
  // The Python interpreter (with torch) that runs the task's PyTorch module, when it has one
  // (kiln/eval/torch_module.h); empty: none here, and such a task cannot be evaluated.
  std::string python;
  // Memory of this process (a report key) that the runners zero in their copy before loading a kernel.
  std::vector<std::pair<void*, size_t>> wipe_in_runners;
};

// The kernel under test: a shared object, loaded only inside its runner process, or (tests) a function
// of this process, called in the runner forked from it.
struct Candidate {
  std::string library;
  KernelEntry entry = nullptr;
};

// A shared object loaded with RTLD_LOCAL | RTLD_NOW, closed on destruction.
class KernelLibrary {
 public:
  static Result<KernelLibrary> open(const std::string& path);
  ~KernelLibrary();
  KernelLibrary(KernelLibrary&& other) noexcept;
  KernelLibrary& operator=(KernelLibrary&& other) noexcept;
  KernelLibrary(const KernelLibrary&) = delete;
  KernelLibrary& operator=(const KernelLibrary&) = delete;

  KernelEntry entry() const { return entry_; }

 private:
  KernelLibrary(void* handle, KernelEntry entry) : handle_(handle), entry_(entry) {}
  void* handle_ = nullptr;
  KernelEntry entry_ = nullptr;
};

// Runs correctness (and, when it passes and options.measure is set, timing) and returns the report:
// status, message, correctness and performance filled; worker, log and duration are the caller's.
// An error means the task cannot be evaluated here (an unknown baseline, an unsupported dtype, a shape
// dim missing from a case), not that the candidate is wrong.
Result<proto::TestReport> evaluate(const task::TaskSpec& spec, const Candidate& candidate, KernelEntry reference,
                                   const EvalOptions& options);
Result<proto::TestReport> evaluate(const task::TaskSpec& spec, KernelEntry candidate, KernelEntry reference,
                                   const EvalOptions& options);

// A time as the report's metadata keeps it ("eval_*_s" keys): seconds, three decimals ("1.234").
std::string metadata_seconds(double s);

// The baselines this build knows (task.yaml `baselines`).
bool is_known_baseline(const std::string& name);

}  // namespace kiln::eval
