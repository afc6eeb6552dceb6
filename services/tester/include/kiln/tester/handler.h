// The "test.<backend>" service (DESIGN §1, §5): runs one candidate's evaluation in a sandboxed kiln-eval
// child and sends the TestReport to the scorer. A candidate that crashes, hangs or exits becomes a report
// ("crashed: SIGSEGV", "timed out after 30 s"), scored against it; the tester itself keeps serving. A fault
// that is not the candidate's is never scored (messaging::outcome_for): the evaluator's or this worker's is
// given back with its cause, the task's (a package that does not parse, another backend) dead-lettered.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kiln/config/config.h"
#include "kiln/cuda/gpu_claim.h"
#include "kiln/core/status.h"
#include "kiln/messaging/handler.h"
#include "kiln/proto/payloads.h"
#include "kiln/sandbox/sandbox.h"
#include "kiln/proto/ids.h"
#include "kiln/proto/wire.h"
#include "kiln/service/service.h"
#include <prometheus/counter.h>

#include "kiln/core/files.h"
#include "kiln/tester/confinement.h"
#include "kiln/tester/gpu_monitor.h"

namespace kiln::tester {

struct TesterOptions {
  proto::Backend backend = proto::Backend::kCpu;  // the service is "test.<backend>"
  std::string eval_binary;    // kiln-eval (cpu) or kiln-eval-cuda (cuda); empty: the one beside this executable
  int64_t gpu_index = -1;     // cuda: NVML index; -1: from CUDA_VISIBLE_DEVICES, else 0
  std::string gpu_claim_dir;  // cuda, gpu_index -1: claim the first free visible GPU there (gpu_claim.h)
  double timeout_s = 120;     // per evaluation child
  int64_t cpu_time_limit_s = 300;
  int64_t memory_limit_mb =
      8192;  // address-space limit of the child (cpu backend; CUDA reserves more address space than any sane limit)
  std::vector<int64_t> pin_cores;  // cores the child may use; empty: all
  // Screens a campaign's first measurements also against the best of that campaign this tester has
  // measured itself (SeenBars): fresher than the bar the request carries, which is the campaign's best when
  // the candidate was proposed (often nothing yet, for the first wave of a campaign).
  bool screen_by_best = true;
  // Evaluations at once (cuda): with more than one, the children share the device's lock file in
  // `lock_dir` (kiln/eval/device_lock.h), created there when missing.
  int64_t slots = 1;
  std::string lock_dir;
  config::TimingConfig timing;
  size_t max_log_bytes = 16384;  // of the child's output kept in the report
  std::string worker_id;
  // Without confinement (tester.allow_unconfined where it cannot be set up, or `confine` false), the
  // sandbox's opt-in defences for the evaluation child; unset: the backend's default (cpu: read-only root;
  // cuda: writable root; process creation is refused inside kiln-eval's runners either way).
  std::optional<bool> readonly_root;
  std::optional<bool> deny_process_creation;
  // false: skip the confinement (the sandbox's older opt-in defences above apply), as tests of those do.
  bool confine = true;
  // Profiler feedback (cuda): after a correct verdict, a separate run of the evaluation child under ncu.
  std::string profile = "ncu";  // ncu | off
  // Which correct candidates: "contenders" (first measurements whose proposer reads profiles and whose
  // interval reaches the campaign's bar on every case; see why_not_profiled) or "all".
  std::string profile_scope = "contenders";
  std::string ncu = "/usr/local/cuda/bin/ncu";
  double profile_timeout_s = 120;
  // Confinement of every evaluation child (confinement.h): as root, slot k's child runs as sandbox_uid + k.
  uint32_t sandbox_uid = 99000;
  // Paths the child must not see (kiln_private_paths).
  std::vector<std::string> hidden_paths;
  // Where confinement cannot be set up: false refuses to evaluate (the job goes back with the reason);
  // true runs candidates unconfined, saying so in every verdict's log. For development only.
  bool allow_unconfined = false;
  // tester.python as configured, and the interpreter with torch found from it when the tester starts
  // (torch_python.h); empty `python`: tasks with a PyTorch module are refused here, and go to another tester.
  std::string python_config;
  std::string python;
  std::string python_missing;  // why there is none
  std::string python_torch_version;
};

// tester.* from the config. Fails for a backend other than cpu or cuda.
Result<TesterOptions> options_from_config(const config::TesterConfig& config);

// The evaluation child for `backend` (kiln-eval, or kiln-eval-cuda for cuda) in the directory of the
// running executable (/proc/self/exe).
Result<std::string> default_eval_binary(proto::Backend backend = proto::Backend::kCpu);

// `cores` split into `slots` groups of consecutive cores, sizes differing by at most one: the cores of each
// evaluation slot, so that one slot's host threads do not compete with another's timing thread. Empty when
// there are fewer cores than slots (then no slot is pinned).
std::vector<std::vector<int>> split_cores(const std::vector<int>& cores, int64_t slots);

// The OpenMP settings every contestant of a CPU evaluation runs under (candidate, reference and baselines
// alike): idle threads sleep instead of spinning (a spinning team of a stopped runner, or of a kernel on a
// loaded host, takes the cores the timed call needs), and with `cores` given, one thread per core, bound
// to those cores.
std::vector<std::string> openmp_env(const std::vector<int>& cores);

// What decides whether a correct CUDA verdict is profiled besides the verdict itself.
struct ProfileChoice {
  std::string_view scope = "all";  // TesterOptions::profile_scope
  double bar = 0;                  // the screening bar the measurement ran under (0: none)
  bool confirmation = false;
  bool wanted = true;  // TestRequest.want_profile: the proposer reads profiler feedback
};

// Why a correct CUDA verdict is not profiled, or empty when it is. A profile costs seconds of ncu replays;
// it is feedback for the proposer, worth those seconds for a kernel that may become the campaign's best.
// Never profiled: a candidate screened out on some case. With scope "contenders", also not: a candidate
// whose proposer reads no profile (the tuner), a confirmation (its candidate was profiled when first
// measured) and a candidate whose interval ends below the bar on some case (it cannot overtake the best the
// bar came from).
std::string why_not_profiled(const proto::TestReport& report, const ProfileChoice& choice = {});

// Per campaign, the screening bar this tester has learned from its own reports: the highest lowest-per-case
// lower bound of a correct first measurement it made in full (no case screened). The same quantity as the
// scorer's bar (the campaign best's min_speedup_lo) for the best this tester has seen, so the same argument
// holds: a candidate whose interval ends below it on a case cannot overtake that kernel. Thread-safe; keeps
// the `max_campaigns` most recently used campaigns.
class SeenBars {
 public:
  explicit SeenBars(size_t max_campaigns = 1024) : max_campaigns_(max_campaigns) {}
  // The bar for `campaign`, 0 when none was learned.
  double bar(const std::string& campaign);
  // Learns from a first measurement's report (confirmations and reports of other kinds teach nothing).
  void record(const std::string& campaign, const proto::TestReport& report);
  size_t size() const;

 private:
  struct Entry {
    double bar = 0;
    uint64_t used = 0;
  };
  mutable std::mutex mu_;
  std::map<std::string, Entry> bars_;
  uint64_t clock_ = 0;
  size_t max_campaigns_;
};

// What one evaluation's scratch folder holds: the task package's files and both shared objects.
struct ScratchFiles {
  const proto::FileMap* task_files = nullptr;
  const std::string* kernel_so = nullptr;
  const std::string* reference_so = nullptr;
};

class TestHandler {
 public:
  // Fails for an evaluation child that is not there, or (cuda) no GPU to serve: such a
  // tester must not register for test.cuda, so CUDA jobs wait visibly in the queue.
  static Result<std::unique_ptr<TestHandler>> create(TesterOptions options);

  // A job with a TestRequest payload. Thread-safe: every evaluation has its own scratch directory.
  messaging::JobOutcome handle(const proto::Job& job);
  // One evaluation; trouble with the candidate is a report. Anything else is an error: trouble running
  // kiln-eval at all, a task package that does not parse, or kiln-eval's own evaluator_error report (the
  // task or the reference cannot be evaluated here); handle() answers those "retry".
  Result<proto::TestReport> evaluate(const proto::TestRequest& request);

  std::string service() const { return proto::test_service_for(options_.backend); }
  // The device lock file the evaluation children share (tester.slots > 1), else empty.
  const std::string& device_lock() const { return device_lock_; }
  proto::Capabilities capabilities() const;
  // Ok when every evaluation child runs confined; else why not (then evaluations are refused, or run
  // unconfined with tester.allow_unconfined).
  Status confinement() const {
    std::lock_guard lock(confinement_mu_);
    return confinement_;
  }
  // cuda: exports the GPU's NVML sensors on `registry` until this handler is destroyed.
  void start_gpu_monitor(std::shared_ptr<prometheus::Registry> registry);
  // Counts on `registry`, per device: kiln_tester_evaluations_total{device, status} (every evaluation, by
  // its status; "error" when it was given back), kiln_tester_timing_seconds_total{device} (wall time of the
  // timing rounds the reports say) and kiln_tester_busy_seconds_total{device} (wall time spent
  // evaluating: its rate is the fraction of time this tester's device is busy with Kiln).
  void start_metrics(prometheus::Registry& registry);
  // Where task packages and references named by blob come from (default: inline only). Set up before the
  // first job.
  void set_task_source(std::shared_ptr<service::TaskSource> tasks) { tasks_ = std::move(tasks); }

 private:
  TestHandler(TesterOptions options, proto::WorkerInfo worker, std::shared_ptr<cuda::Nvml> nvml, cuda::GpuIdentity gpu,
              cuda::GpuClaim claim = {});
  // The evaluation child's command line; it writes its report to `result_file` in the scratch directory.
  // `screen_below` > 0: the evaluator may stop timing a case once its interval cannot reach it (never for a
  // confirmation).
  std::vector<std::string> eval_argv(const char* result_file, double screen_below = 0) const;
  // The sandbox every run of the evaluation child gets (scratch, environment, limits, confinement).
  // `slot`: the evaluation slot the child runs in (its cores, with several slots), or -1.
  sandbox::SandboxOptions child_sandbox(const std::string& scratch, std::vector<std::string> argv, double timeout_s,
                                        int slot = -1) const;
  // A free evaluation slot for one evaluate() (the service runs at most `slots` at once), or -1.
  int take_slot();
  void give_slot(int slot);
  // Profiler feedback for a correct CUDA verdict: the child once more, under ncu, calling only the
  // candidate. Fills report.profile and profile_summary; any trouble is a line in profile_summary.
  void profile(const ScratchFiles& files, proto::TestReport& report, const ProfileChoice& choice, int slot) const;
  // A fresh scratch folder with the task package, both libraries and a fresh report key, handed to slot
  // `slot`'s child.
  struct Scratch {
    TempDir dir{"kiln-test"};
    std::string key;
  };
  Result<Scratch> make_scratch(const ScratchFiles& files, int slot) const;
  bool confined() const { return confined_.load(); }
  // In a tester that refuses to evaluate because the check failed: the check once more, at most every
  // kRecheckConfinementS (a check that failed at a busy start may pass now). Never makes a confined tester
  // unconfined. True when candidates may now run confined.
  bool recheck_confinement();

  TesterOptions options_;
  std::shared_ptr<service::TaskSource> tasks_ = std::make_shared<service::TaskSource>();
  proto::WorkerInfo worker_;  // this host (and GPU), for reports the child could not write
  // TestReport.metadata common to every evaluation: the evaluation child and its hash, Kiln's version,
  // the timing options and the timeout.
  std::map<std::string, std::string> run_metadata_;
  std::string device_lock_;   // the device lock file the children share (slots > 1), else empty
  ConfinementPolicy policy_;  // how children are confined (when confinement_ is ok)
  // Whether candidates run confined (confinement_ ok); it only ever goes from false to true.
  std::atomic<bool> confined_{false};
  mutable std::mutex confinement_mu_;  // guards confinement_ and confinement_checked_at_
  Status confinement_ = failed_precondition("not checked");
  double confinement_checked_at_ = 0;
  SeenBars seen_bars_;  // options_.screen_by_best
  // With several slots: which are taken, and each one's cores (tester.pin_cores, else the cores this
  // process may run on, split by split_cores).
  std::mutex slot_mu_;
  std::vector<bool> slot_taken_;
  std::vector<std::vector<int>> slot_cores_;

  static Result<std::unique_ptr<TestHandler>> with_device_lock(std::unique_ptr<TestHandler> h);
  static std::unique_ptr<TestHandler> with_confinement(std::unique_ptr<TestHandler> h);
  std::shared_ptr<cuda::Nvml> nvml_;  // cuda only
  cuda::GpuIdentity gpu_;             // cuda: the GPU this tester serves; its uuid is the child's CUDA_VISIBLE_DEVICES
  cuda::GpuClaim gpu_claim_;          // cuda with gpu_claim_dir: held while this handler lives
  prometheus::Family<prometheus::Counter>* evaluations_ = nullptr;  // start_metrics
  prometheus::Counter* busy_seconds_ = nullptr;
  prometheus::Counter* timing_seconds_ = nullptr;  // start_metrics
  std::shared_ptr<GpuMonitor> monitor_;
};

// Handler factory for services/tester/main.cc: tester.* from the config, one slot (one device); for cuda,
// NVML gauges of the tester's GPU on ctx.metrics.
Result<service::ServiceHandlers> make_test_handlers(const service::ServiceContext& ctx);

}  // namespace kiln::tester
