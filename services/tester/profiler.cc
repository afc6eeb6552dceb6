#include "profiler.h"

#include <unistd.h>

#include <cstdlib>
#include <utility>

#include "kiln/core/time.h"
#include "kiln/cuda/profile.h"
#include "kiln/eval/device_lock.h"
#include "kiln/task/task.h"

namespace kiln::tester {
namespace {

// The profiling run's report and ncu's CSV, in the same scratch directory; at most this many kernel
// launches are profiled (ncu replays each one many times).
constexpr const char* kProfileResultFile = "profile.msgpack";
constexpr const char* kProfileCsvFile = "ncu.csv";
constexpr int kProfileMaxKernels = 16;
constexpr size_t kMaxProfileCsvBytes = 4u << 20;
// Nsight Compute runs at most this often for one verdict: once, and once more after a passing failure.
constexpr int kProfileAttempts = 2;

}  // namespace

std::string why_not_profiled(const proto::TestReport& report, const ProfileChoice& choice) {
  for (const auto& c : report.performance.cases) {
    if (c.stop_reason == proto::stop_reason::kScreened)
      return "screened out on " + task::dims_string({c.dims.begin(), c.dims.end()});
  }
  if (choice.scope != "contenders") return {};
  if (!choice.wanted) return "its proposer reads no profile";
  if (choice.confirmation) return "a confirmation (its candidate was profiled when first measured)";
  for (const auto& c : report.performance.cases) {
    if (choice.bar > 0 && c.speedup_hi < choice.bar) {
      return "no contender: " + short_number(c.speedup_hi) + "x at most on " +
             task::dims_string({c.dims.begin(), c.dims.end()}) + ", the bar is " + short_number(choice.bar) + "x";
    }
  }
  return {};
}

void profile(const EvalChild& child, const ScratchFiles& files, proto::TestReport& report, const ProfileChoice& choice,
             int slot) {
  const TesterOptions& options = child.options();
  if (options.backend != proto::Backend::kCuda || options.profile != "ncu" || report.status != proto::TestStatus::kOk)
    return;
  const double start = monotonic_s();
  auto skipped = [&](const std::string& why) {
    report.profile_summary = "profiling skipped: " + why;
    append_log_line(report, report.profile_summary);
  };
  if (std::string why = why_not_profiled(report, choice); !why.empty()) return skipped(why);
  if (::access(options.ncu.c_str(), X_OK) != 0) return skipped("no ncu at " + options.ncu);
  // A scratch folder of its own: the measured run's candidate had the other one to itself, and nothing
  // it may have left there (a link where a file will be written or read) reaches this run.
  // Only a report the child signed is read for the profiled process.
  auto made = child.make_scratch(files, slot);
  if (!made.is_ok()) return skipped(made.status().message());
  const Scratch fresh = std::move(made).value();
  const std::string& scratch = fresh.dir.path();
  const std::string* key = &fresh.key;
  std::vector<std::string> argv = child.argv(kProfileResultFile);
  argv.push_back("--profile");
  const std::string csv = std::string(kProfileCsvFile);
  sandbox::SandboxOptions run = child.sandbox(scratch, cuda::ncu_argv(options.ncu, csv, kProfileMaxKernels, argv),
                                              options.profile_timeout_s, slot);
  // One Nsight Compute session per GPU at a time: two at once (this tester's slots) make one fail.
  const std::string& device_lock = child.device_lock();
  auto ncu_lock = eval::DeviceLock::open(device_lock.empty() ? std::string() : device_lock + ".ncu");
  if (!ncu_lock.is_ok()) return skipped(ncu_lock.status().message());
  auto hold = ncu_lock->hold(eval::DeviceLock::Mode::kExclusive);
  if (!hold.is_ok()) return skipped(hold.status().message());
  Result<sandbox::SandboxResult> ran = unavailable("not run");
  for (int attempt = 1; attempt <= kProfileAttempts; ++attempt) {
    ran = sandbox::run_sandboxed(run);
    if (!ran.is_ok()) return skipped(ran.status().message());
    if (ran->succeeded()) break;
    const std::string out = ran->stdout_text + ran->stderr_text;
    // ncu's own reason, named: no permission for the counters (ERR_NVGPUCTRPERM), or its ==ERROR== lines.
    std::string why = cuda::ncu_errors(out);
    if (out.find("ERR_NVGPUCTRPERM") != std::string::npos)
      why = "ncu may not read the GPU's performance counters here (ERR_NVGPUCTRPERM)";
    why = ran->describe(run.timeout_s) + (why.empty() ? "" : ": " + why);
    if (attempt == kProfileAttempts || ran->timed_out || !cuda::ncu_failure_is_transient(out)) {
      return skipped(attempt > 1 ? why + " (after " + std::to_string(attempt) + " tries)" : why);
    }
    append_log_line(report, "profiling: ncu failed (" + why + "); trying once more");
  }
  auto profiled = read_signed_report(scratch, kProfileResultFile, *key);
  if (!profiled.is_ok()) return skipped("the profiling run: " + profiled.status().message());
  if (profiled->status != proto::TestStatus::kOk) return skipped("the profiling run failed: " + profiled->message);
  const auto pid = profiled->metadata.find("profile_pid");
  auto text = read_child_file(scratch + "/" + csv, kMaxProfileCsvBytes);
  if (pid == profiled->metadata.end() || !text.is_ok()) return skipped("ncu wrote no results");
  auto parsed = cuda::parse_ncu_csv(*text, std::atoll(pid->second.c_str()));
  if (!parsed.is_ok()) return skipped(parsed.status().message());
  report.profile = std::move(parsed->metrics);
  report.profile["profile_s"] = monotonic_s() - start;
  auto where = profiled->metadata.find("profile_case");
  report.profile_summary =
      "profile" + (where == profiled->metadata.end() ? std::string() : " on " + where->second) + ": " + parsed->summary;
  append_log_line(report, report.profile_summary);
}

}  // namespace kiln::tester
