#include "evaluator.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <utility>
#include <vector>

#include "kiln/core/cpus.h"
#include "kiln/core/files.h"
#include "kiln/core/hash.h"
#include "kiln/core/time.h"
#include "kiln/eval/torch_module.h"
#include "kiln/eval/device_lock.h"
#include "kiln/messaging/outcome.h"
#include "kiln/tester/torch_python.h"
#include "profiler.h"

namespace kiln::tester {
namespace {

// kiln-eval with debug information is about 15 MB; a binary past this bound is not hashed at all.
constexpr size_t kMaxEvaluatorBytes = 512u << 20;

// Said in the log of every verdict a candidate earned without confinement.
constexpr const char* kUnconfinedWarning =
    "WARNING: this candidate ran UNCONFINED (tester.allow_unconfined): it had the tester's rights on this host";

// The cores the slots split (with several slots): tester.pin_cores, else the cores this process may run on.
std::vector<int> slot_cores(const TesterOptions& options) {
  if (options.slots <= 1) return {};
  std::vector<int> cores;
  for (int64_t c : options.pin_cores) cores.push_back(static_cast<int>(c));
  return cores.empty() ? allowed_cores() : cores;
}

}  // namespace

// One evaluation under way: when it began, the child's run once there was one, and the report's metadata;
// finish() completes a report with them.
struct Evaluator::Run {
  const Evaluator& evaluator;
  double start = monotonic_s();
  proto::ProcessResult process;
  std::map<std::string, std::string> metadata = evaluator.run_metadata_;

  proto::TestReport finish(proto::TestReport r) const {
    if (r.worker.device_name.empty()) r.worker = evaluator.worker();
    r.worker.worker_id = evaluator.options_.worker_id;
    // The model named as this tester announced it (READY's gpu_name), which a confirmation is routed by;
    // the evaluator's own name for it (the CUDA runtime's rather than NVML's) may be spelled otherwise.
    if (!evaluator.worker().device_name.empty()) r.worker.device_name = evaluator.worker().device_name;
    r.duration_s = monotonic_s() - start;
    r.process = process;
    r.metadata = metadata;
    return r;
  }
};

Evaluator::Evaluator(TesterOptions options, TesterDevice device)
    : options_(std::move(options)), device_(std::move(device)), slots_(options_.slots, slot_cores(options_)) {
  device_.worker.worker_id = options_.worker_id;
  const auto& t = options_.timing;
  run_metadata_ = {
      {"evaluator", std::filesystem::path(options_.eval_binary).filename().string()},
      {"kiln_version", KILN_VERSION},
      {"timing_mode", t.mode},
      {"timing_min_samples", std::to_string(t.min_samples)},
      {"timing_min_time_s", short_number(t.min_time_s)},
      {"timing_max_time_s", short_number(t.max_time_s)},
      {"timing_max_noise", short_number(t.max_noise)},
      {"timing_precision", short_number(t.precision)},
      {"timing_warmup_iters", std::to_string(t.warmup_iters)},
      {"timing_settle_calls", std::to_string(t.settle_calls)},
      {"timeout_s", short_number(options_.timeout_s)},
  };
  // The evaluator's version as built: its binary's hash (the child is rebuilt with Kiln, and any change
  // to how it measures changes it). Read once; a binary that cannot be read leaves the key out.
  if (auto binary = read_file(options_.eval_binary, kMaxEvaluatorBytes); binary.is_ok())
    run_metadata_["evaluator_sha256"] = sha256_hex(*binary);
  policy_.sandbox_uid = options_.sandbox_uid;
  policy_.hidden = options_.hidden_paths;
  policy_.eval_binary = options_.eval_binary;
  if (const char* lib_path = std::getenv("LD_LIBRARY_PATH"); lib_path && *lib_path) policy_.add_library_path(lib_path);
}

Result<std::unique_ptr<Evaluator>> Evaluator::create(TesterOptions options) {
  if (!(options.timeout_s > 0)) return invalid_argument("tester: timeout_s must be positive");
  if (options.eval_binary.empty()) {
    KILN_ASSIGN_OR_RETURN(options.eval_binary, default_eval_binary(options.backend));
  }
  if (options.python.empty() && options.python_missing.empty()) {
    const TorchPython torch = find_torch_python(options.python_config);
    options.python = torch.path;
    options.python_torch_version = torch.version;
    options.python_missing = torch.why_none;
  }
  if (access(options.eval_binary.c_str(), X_OK) != 0) {
    return not_found(
        "tester: no evaluation child at " + options.eval_binary +
        (options.backend == proto::Backend::kCuda ? " (was this build made without the CUDA toolkit?)" : ""));
  }
  KILN_ASSIGN_OR_RETURN(TesterDevice device, open_device(options));
  std::unique_ptr<Evaluator> e(new Evaluator(std::move(options), std::move(device)));
  KILN_RETURN_IF_ERROR(e->open_device_lock());
  // Checks once, at start, that children can be confined here, and says how they will run.
  if (!e->device_lock_.empty()) e->policy_.lock_dir = std::filesystem::path(e->device_lock_).parent_path().string();
  e->confinement_.check_at_start();
  return e;
}

Status Evaluator::open_device_lock() {
  const TesterOptions& o = options_;
  if (o.slots <= 1) return Status::ok();
  if (o.lock_dir.empty()) return invalid_argument("tester: slots > 1 needs a folder for the device lock");
  KILN_RETURN_IF_ERROR(make_dirs(o.lock_dir).with_context("tester: device lock folder"));
  const std::string& uuid = device_.gpu.uuid;
  device_lock_ = o.lock_dir + "/device-" + (uuid.empty() ? std::string("cpu") : uuid) + ".lock";
  return eval::DeviceLock::open(device_lock_).status().with_context("tester");
}

proto::Capabilities Evaluator::capabilities() const {
  proto::Capabilities caps;
  caps.backend = options_.backend;
  caps.gpu_name = device_.worker.device_name;  // the device this tester measures on: the GPU, or the CPU model
  caps.gpu_uuid = device_.worker.gpu_uuid;
  caps.arch = options_.backend == proto::Backend::kCuda ? device_.gpu.arch() : host_arch();
  caps.host = device_.worker.host;
  caps.confinement = confinement_.describe();
  return caps;
}

void Evaluator::start_gpu_monitor(std::shared_ptr<prometheus::Registry> registry) {
  if (device_.nvml && registry && !monitor_)
    monitor_ = std::make_shared<GpuMonitor>(device_.nvml, device_.gpu, std::move(registry));
}

Status Evaluator::check(const TestJob& job) {
  // A task routed to the wrong backend is the job's fault, permanently.
  if (job.spec().backend != options_.backend) {
    return failed_precondition("tester: the task's backend is " + std::string(proto::name(job.spec().backend)) +
                               ", this tester runs " + std::string(proto::name(options_.backend)));
  }
  // A task that runs a PyTorch module goes to a tester with torch: given back, for another tester to take.
  if (job.spec().torch_reference() && options_.python.empty()) {
    return unavailable("tester: the task runs a PyTorch module (" + job.spec().reference_file +
                       "), and this tester has no Python with torch: " + options_.python_missing);
  }
  return confinement_.may_run();
}

Result<proto::TestReport> Evaluator::evaluate(const TestJob& job) {
  Run run{*this};
  const task::TaskSpec& spec = job.spec();
  // What the speedup is against: a PyTorch reference is what a user runs (eager mode).
  if (spec.torch_reference()) run.metadata["reference"] = "torch_eager";
  if (eval::uses_torch(spec) && !options_.python.empty()) run.metadata["torch"] = options_.python_torch_version;
  // The torch baselines of a task with a C reference are left out where there is no torch: said, not hidden.
  if (eval::uses_torch(spec) && options_.python.empty())
    run.metadata["baselines_left_out"] = "torch_eager, torch_compile: " + options_.python_missing;
  // A confirmation is measured in full; a first measurement may be screened. The bar is the highest of this
  // tester's (the promotion bar at most), the campaign's (its best when the candidate was proposed) and the
  // campaign's best this tester has measured since.
  const std::string& campaign = job.cand.campaign_id;
  const double seen = options_.screen_by_best && !job.confirmation() ? seen_bars_.bar(campaign) : 0;
  const ScreenBar bar = screen_bar(options_.timing.screen_below, job.screen_below, seen, job.confirmation());
  if (bar.below > 0) {
    run.metadata["timing_screen_below"] = short_number(bar.below);
    run.metadata["timing_screen_by"] = bar.by;
  }
  // With several slots, this evaluation's own cores: another slot's host work must not delay the launches
  // of a case being timed here (CUDA-event intervals would stretch with them).
  const SlotHold hold(slots_);
  const int slot = hold.slot();
  if (const std::vector<int>& cores = slots_.cores(slot); !cores.empty()) {
    run.metadata["slot"] = std::to_string(slot);
    std::string listed;
    for (int c : cores) listed += (listed.empty() ? "" : ",") + std::to_string(c);
    run.metadata["slot_cores"] = listed;
  }
  const ScratchFiles files{&job.package->files, &job.kernel_so, job.reference_so.get()};
  auto made = child_.make_scratch(files, slot);
  if (!made.is_ok()) return messaging::worker_fault(made.status()).with_context("tester: scratch dir");
  const Scratch scratch = std::move(made).value();

  sandbox::SandboxOptions options =
      child_.sandbox(scratch.dir.path(), child_.argv(kResultFile, bar.below), options_.timeout_s, slot);
  auto ran = sandbox::run_sandboxed(options);
  if (!ran.is_ok()) return messaging::worker_fault(ran.status()).with_context("tester: evaluation child");
  const sandbox::SandboxResult child = std::move(ran).value();
  KILN_ASSIGN_OR_RETURN(proto::TestReport report, judge(run, child, options.timeout_s, scratch));
  if (options_.screen_by_best && !job.confirmation()) seen_bars_.record(campaign, report);
  profile(child_, files, report,
          {.scope = options_.profile_scope,
           .bar = bar.below,
           .confirmation = job.confirmation(),
           .wanted = job.want_profile},
          slot);
  return run.finish(std::move(report));
}

Result<proto::TestReport> Evaluator::judge(Run& run, const sandbox::SandboxResult& child, double timeout_s,
                                           const Scratch& scratch) {
  const std::string log_tail = tail(child.stderr_text + child.stdout_text, options_.max_log_bytes);
  const auto [out_budget, err_budget] =
      proto::stream_budgets(child.stdout_text.size(), child.stderr_text.size(), options_.max_log_bytes);
  auto& metadata = run.metadata;
  metadata["isolation_network"] = child.network_isolation;
  metadata["isolation_pids"] = child.pid_isolation;
  metadata["isolation_filesystem"] = child.filesystem_isolation;
  metadata["isolation_user"] =
      child.user_isolation + (child.child_uid >= 0 ? " uid " + std::to_string(child.child_uid) : std::string());
  // Every verdict an unconfined candidate earns says so, first in its log.
  const std::string log = child_.confined() ? log_tail : std::string(kUnconfinedWarning) + "\n" + log_tail;
  run.process.returncode = child.returncode();
  run.process.stdout_text = tail(child.stdout_text, out_budget);
  run.process.stderr_text = tail(child.stderr_text, err_budget);
  if (!child.succeeded()) run.process.message = child.describe(timeout_s);
  auto failed = [&](proto::TestStatus status, std::string message) {
    proto::TestReport r;
    r.status = status;
    r.message = std::move(message);
    r.log = log;
    return r;
  };
  if (child.timed_out)
    return failed(proto::TestStatus::kTimedOut, "timed out after " + sandbox::format_seconds(timeout_s));
  if (child.term_signal != 0) {
    return failed(proto::TestStatus::kCrashed, "crashed: " + sandbox::signal_description(child.term_signal));
  }
  if (child.exit_code != 0) {
    return failed(proto::TestStatus::kCrashed, "crashed: exit code " + std::to_string(child.exit_code));
  }
  auto signed_report = read_signed_report(scratch.dir.path(), kResultFile, scratch.key);
  if (!signed_report.is_ok())
    return failed(proto::TestStatus::kCrashed, "crashed: " + signed_report.status().message());
  proto::TestReport report = std::move(signed_report).value();
  // The evaluator's account of where its time went ("eval_correctness_s", "eval_measure_s"); the rest of
  // the metadata is the tester's own.
  for (const auto& [k, v] : report.metadata) {
    if (k.rfind("eval_", 0) == 0) metadata[k] = v;
  }
  metadata["eval_child_s"] = short_number(child.wall_s);
  if (report.status == proto::TestStatus::kEvaluatorError) {
    // kiln-eval says, in a report it signed, that it could not evaluate here: not the candidate's verdict.
    return unavailable("the evaluator could not evaluate: " + report.message);
  }
  report.log = log;
  return report;
}

}  // namespace kiln::tester
