#include "kiln/tester/handler.h"

#include <prometheus/counter.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <limits>
#include <utility>

#include "kiln/core/cpus.h"
#include "kiln/core/files.h"
#include "kiln/core/hash.h"
#include "kiln/core/time.h"
#include "kiln/cuda/nvml.h"
#include "kiln/cuda/profile.h"
#include "kiln/eval/device_lock.h"
#include "kiln/eval/host.h"
#include "kiln/eval/tool.h"
#include "kiln/messaging/outcome.h"
#include "kiln/proto/ids.h"
#include "kiln/sandbox/sandbox.h"
#include "kiln/task/task.h"
#include "kiln/tester/torch_python.h"

namespace kiln::tester {
namespace {

// The status label values of kiln_tester_evaluations_total: every test_status, "error" for an evaluation
// given back, "other" for anything else, so the series stay a fixed set.
constexpr std::array<std::string_view, 10> kCountedStatuses = {proto::test_status::kOk,
                                                               proto::test_status::kMismatch,
                                                               proto::test_status::kInputModified,
                                                               proto::test_status::kWrongShape,
                                                               proto::test_status::kNonFinite,
                                                               proto::test_status::kCrashed,
                                                               proto::test_status::kTimedOut,
                                                               proto::test_status::kLoadFailed,
                                                               "error",
                                                               "other"};

// Names inside the scratch directory of one evaluation.
constexpr const char* kTaskDir = "task";
constexpr const char* kKernelFile = "kernel.so";
constexpr const char* kReferenceFile = "reference.so";
constexpr const char* kResultFile = "result.msgpack";
// The key that authenticates the child's report; the child reads and removes it before any candidate
// code runs.
constexpr const char* kReportKeyFile = "report.key";
constexpr size_t kReportKeyBytes = 32;
// A kernel library larger than this as built is refused before it is inflated (a built kernel is kilobytes to
// a few megabytes; a message is at most broker.max_message_bytes, 64 MiB by default, deflated).
constexpr size_t kMaxLibraryBytes = size_t{512} << 20;
// The profiling run's report and ncu's CSV, in the same scratch directory; at most this many kernel
// launches are profiled (ncu replays each one many times).
constexpr const char* kProfileResultFile = "profile.msgpack";
constexpr const char* kProfileCsvFile = "ncu.csv";
constexpr int kProfileMaxKernels = 16;
constexpr size_t kMaxProfileCsvBytes = 4u << 20;
// The child writes a report of a few kB; this only stops a candidate filling the disk.
constexpr int64_t kMaxChildFileBytes = 256ll << 20;
// kiln-eval with debug information is about 15 MB; a binary past this bound is not hashed at all.
constexpr size_t kMaxEvaluatorBytes = 512u << 20;

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// A number as people read it in metadata ("0.005", "15").
std::string short_number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// The end of `text` within `max_bytes`: when a child dies, its last lines say where.
std::string tail(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t cut = text.size() - max_bytes;
  size_t eol = text.find('\n', cut);
  if (eol != std::string::npos && eol + 1 < text.size()) cut = eol + 1;
  return "[... " + std::to_string(cut) + " bytes dropped]\n" + text.substr(cut);
}

// Files the child wrote are read without following links: a candidate could leave a link to a file only
// the tester may read where its report should be.
Result<std::string> read_child_file(const std::string& path, size_t max_bytes = 64u << 20) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return not_found(path + ": " + std::strerror(errno));
  struct stat st {};
  std::string out;
  Status status = Status::ok();
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    status = failed_precondition(path + ": not a regular file");
  } else if (static_cast<size_t>(st.st_size) > max_bytes) {
    status =
        resource_exhausted(path + ": " + std::to_string(st.st_size) + " bytes, limit " + std::to_string(max_bytes));
  } else {
    out.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < out.size()) {
      const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    out.resize(got);
  }
  ::close(fd);
  if (!status.is_ok()) return status;
  return out;
}

// How often a tester that could not confine tries again, at most (on a job it would otherwise refuse).
constexpr double kRecheckConfinementS = 10;

// Nsight Compute runs at most this often for one verdict: once, and once more after a passing failure.
constexpr int kProfileAttempts = 2;

// Said in the log of every verdict a candidate earned without confinement.
constexpr const char* kUnconfinedWarning =
    "WARNING: this candidate ran UNCONFINED (tester.allow_unconfined): it had the tester's rights on this host";

Status write_request_files(const std::string& dir, const proto::FileMap& files, const std::string& kernel_so,
                           const std::string& reference_so) {
  // File names come from a package that task::parse_task accepted: relative, without "..".
  for (const auto& [name, content] : files) {
    const std::string path = dir + "/" + kTaskDir + "/" + name;
    KILN_RETURN_IF_ERROR(make_dirs(std::filesystem::path(path).parent_path().string()));
    KILN_RETURN_IF_ERROR(write_file_atomic(path, content.data));
  }
  KILN_RETURN_IF_ERROR(write_file_atomic(dir + "/" + kKernelFile, kernel_so));
  return write_file_atomic(dir + "/" + kReferenceFile, reference_so);
}

// A fresh key for one run of the evaluation child, in `dir` where it reads (and removes) it: only a report
// the child wrote with it is believed (a candidate that writes a report file of its own cannot sign it).
Result<std::string> write_report_key(const std::string& dir) {
  std::string key = random_bytes(kReportKeyBytes);
  if (key.size() != kReportKeyBytes) return internal_error("no random bytes for the report key");
  const std::string path = dir + "/" + kReportKeyFile;
  KILN_RETURN_IF_ERROR(write_file_atomic(path, key).with_context("report key"));
  ::chmod(path.c_str(), 0600);
  return key;
}

// The report the child wrote to `dir`/`file` and signed with `key`; the error says what was wrong with it.
Result<proto::TestReport> read_signed_report(const std::string& dir, const char* file, const std::string& key) {
  const std::string path = dir + "/" + file;
  auto bytes = read_child_file(path);
  if (!bytes.is_ok()) return not_found("exited without writing a result");
  auto mac = read_child_file(eval::report_mac_path(path), 4096);
  if (!mac.is_ok() || !eval::report_authentic(key, *bytes, *mac))
    return failed_precondition("the result was not written by the evaluator (its authentication failed)");
  auto decoded = proto::decode<proto::TestReport>(*bytes);
  if (!decoded.is_ok()) return invalid_argument("unreadable result: " + decoded.status().message());
  return decoded;
}

// Adds a line to a report's log, on a line of its own.
void append_log_line(proto::TestReport& report, const std::string& line) {
  report.log += (report.log.empty() || report.log.back() == '\n' ? "" : "\n") + line + "\n";
}

}  // namespace

Result<TesterOptions> options_from_config(const config::TesterConfig& config) {
  TesterOptions o;
  auto backend = proto::parse_backend(config.backend);
  if (!backend.is_ok()) return invalid_argument("tester: unknown backend '" + config.backend + "' (cpu | cuda)");
  o.backend = *backend;
  o.gpu_index = config.gpu_index;
  o.gpu_claim_dir = config.gpu_claim_dir;
  o.timeout_s = config.timeout_s;
  o.cpu_time_limit_s = config.cpu_time_limit_s;
  o.memory_limit_mb = config.memory_limit_mb;
  o.pin_cores = config.pin_cores;
  o.slots = config.slots > 0 ? config.slots : *backend == proto::Backend::kCuda ? config::kDefaultCudaSlots : 1;
  o.screen_by_best = config.screen_by_best != 0;
  o.timing = config.timing;
  o.profile = config.profile;
  o.profile_scope = config.profile_scope;
  o.ncu = config.ncu;
  o.profile_timeout_s = config.profile_timeout_s;
  o.sandbox_uid = static_cast<uint32_t>(config.sandbox_uid);
  o.allow_unconfined = config.allow_unconfined != 0;
  o.python_config = config.python;
  return o;
}

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

double SeenBars::bar(const std::string& campaign) {
  std::lock_guard lock(mu_);
  auto it = bars_.find(campaign);
  if (it == bars_.end()) return 0;
  it->second.used = ++clock_;
  return it->second.bar;
}

void SeenBars::record(const std::string& campaign, const proto::TestReport& report) {
  if (campaign.empty() || report.status != proto::test_status::kOk || !report.performance.measured ||
      report.performance.cases.empty())
    return;
  double lowest = std::numeric_limits<double>::infinity();
  for (const auto& c : report.performance.cases) {
    if (c.stop_reason == proto::stop_reason::kScreened || !std::isfinite(c.speedup_lo)) return;
    lowest = std::min(lowest, c.speedup_lo);
  }
  if (!(lowest > 0)) return;
  std::lock_guard lock(mu_);
  Entry& e = bars_[campaign];
  e.bar = std::max(e.bar, lowest);
  e.used = ++clock_;
  if (bars_.size() > max_campaigns_) {
    auto oldest = std::min_element(bars_.begin(), bars_.end(),
                                   [](const auto& a, const auto& b) { return a.second.used < b.second.used; });
    bars_.erase(oldest);
  }
}

size_t SeenBars::size() const {
  std::lock_guard lock(mu_);
  return bars_.size();
}

std::vector<std::string> openmp_env(const std::vector<int>& cores) {
  std::vector<std::string> env = {"OMP_WAIT_POLICY=passive", "OMP_DYNAMIC=false"};
  if (!cores.empty()) {
    env.push_back("OMP_NUM_THREADS=" + std::to_string(cores.size()));
    env.push_back("OMP_PROC_BIND=close");
    env.push_back("OMP_PLACES=cores");
  }
  return env;
}

std::vector<std::vector<int>> split_cores(const std::vector<int>& cores, int64_t slots) {
  if (slots < 1 || cores.size() < static_cast<size_t>(slots)) return {};
  std::vector<std::vector<int>> groups(static_cast<size_t>(slots));
  const size_t base = cores.size() / groups.size(), extra = cores.size() % groups.size();
  size_t at = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const size_t n = base + (g < extra ? 1 : 0);
    groups[g].assign(cores.begin() + static_cast<std::ptrdiff_t>(at),
                     cores.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  return groups;
}

int TestHandler::take_slot() {
  std::lock_guard lock(slot_mu_);
  for (size_t i = 0; i < slot_taken_.size(); ++i) {
    if (!slot_taken_[i]) {
      slot_taken_[i] = true;
      return static_cast<int>(i);
    }
  }
  return -1;
}

void TestHandler::give_slot(int slot) {
  if (slot < 0) return;
  std::lock_guard lock(slot_mu_);
  slot_taken_.at(static_cast<size_t>(slot)) = false;
}

Result<std::string> default_eval_binary(proto::Backend backend) {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return not_found("tester: cannot read /proc/self/exe: " + ec.message());
  return (self.parent_path() / (backend == proto::Backend::kCuda ? "kiln-eval-cuda" : "kiln-eval")).string();
}

TestHandler::TestHandler(TesterOptions options, proto::WorkerInfo worker, std::shared_ptr<cuda::Nvml> nvml,
                         cuda::GpuIdentity gpu, cuda::GpuClaim claim)
    : options_(std::move(options)),
      worker_(std::move(worker)),
      nvml_(std::move(nvml)),
      gpu_(std::move(gpu)),
      gpu_claim_(std::move(claim)) {
  worker_.worker_id = options_.worker_id;
  if (options_.slots > 1) {
    slot_taken_.assign(static_cast<size_t>(options_.slots), false);
    std::vector<int> cores;
    for (int64_t c : options_.pin_cores) cores.push_back(static_cast<int>(c));
    slot_cores_ = split_cores(cores.empty() ? allowed_cores() : cores, options_.slots);
  }
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

// Checks once, at start, that children can be confined here, and says how they will run.
std::unique_ptr<TestHandler> TestHandler::with_confinement(std::unique_ptr<TestHandler> h) {
  if (!h->device_lock_.empty()) h->policy_.lock_dir = std::filesystem::path(h->device_lock_).parent_path().string();
  const TesterOptions& o = h->options_;
  h->confinement_ = o.confine ? check_confinement(h->policy_)
                              : failed_precondition("confinement is off for this tester (TesterOptions::confine)");
  h->confinement_checked_at_ = monotonic_s();
  h->confined_ = h->confinement_.is_ok();
  if (h->confinement_.is_ok()) {
    spdlog::info("tester: candidates run confined: {}, read-only root, PID, mount and network namespaces",
                 sandbox::can_map_other_ids() ? "as uid " + std::to_string(o.sandbox_uid) + "+slot"
                                              : "in a user namespace of uid " + std::to_string(geteuid()));
  } else if (o.allow_unconfined || !o.confine) {
    spdlog::warn("tester: candidates run UNCONFINED ({}): {}",
                 o.confine ? "tester.allow_unconfined" : "confinement off", h->confinement_.message());
  } else {
    spdlog::error(
        "tester: cannot confine candidates here, so every evaluation is refused: {} "
        "(tester.allow_unconfined: 1 runs them unconfined, for development only)",
        h->confinement_.message());
  }
  return h;
}

// With several slots, the device lock file the children share: one per device, in lock_dir.
Result<std::unique_ptr<TestHandler>> TestHandler::with_device_lock(std::unique_ptr<TestHandler> h) {
  const TesterOptions& o = h->options_;
  if (o.slots <= 1) return with_confinement(std::move(h));
  if (o.lock_dir.empty()) return invalid_argument("tester: slots > 1 needs a folder for the device lock");
  KILN_RETURN_IF_ERROR(make_dirs(o.lock_dir).with_context("tester: device lock folder"));
  h->device_lock_ = o.lock_dir + "/device-" + (h->gpu_.uuid.empty() ? std::string("cpu") : h->gpu_.uuid) + ".lock";
  KILN_RETURN_IF_ERROR(eval::DeviceLock::open(h->device_lock_).status().with_context("tester"));
  return with_confinement(std::move(h));
}

Result<std::unique_ptr<TestHandler>> TestHandler::create(TesterOptions options) {
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
  if (options.backend == proto::Backend::kCpu) {
    return with_device_lock(
        std::unique_ptr<TestHandler>(new TestHandler(std::move(options), eval::cpu_worker_info(), nullptr, {})));
  }
  // A CUDA tester needs a GPU it can name; without one it must not register for test.cuda.
  auto nvml = cuda::Nvml::load();
  if (!nvml.is_ok()) return failed_precondition("tester: backend cuda but no usable GPU: " + nvml.status().message());
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  cuda::GpuClaim claim;
  Result<cuda::GpuIdentity> gpu = internal_error("no GPU selected");
  if (options.gpu_claim_dir.empty() || options.gpu_index >= 0) {
    gpu = cuda::select_gpu(**nvml, options.gpu_index, visible);
  } else {
    // Testers sharing the claim folder take distinct GPUs: the first visible one no other tester holds.
    auto gpus = cuda::visible_gpus(**nvml, visible);
    if (!gpus.is_ok()) return failed_precondition("tester: backend cuda but no usable GPU: " + gpus.status().message());
    std::vector<std::string> uuids;
    for (const auto& g : *gpus) uuids.push_back(g.uuid);
    auto claimed = cuda::GpuClaim::first_free(options.gpu_claim_dir, uuids);
    if (!claimed.is_ok()) return failed_precondition("tester: no GPU to serve: " + claimed.status().message());
    gpu = (*gpus)[claimed->index()];
    claim = std::move(claimed).value();
  }
  if (!gpu.is_ok()) return failed_precondition("tester: backend cuda but no usable GPU: " + gpu.status().message());
  proto::WorkerInfo worker;
  worker.backend = std::string(proto::name(proto::Backend::kCuda));
  worker.host = eval::host_name();
  worker.device_name = gpu->name;
  worker.gpu_uuid = gpu->uuid;
  worker.driver_version = gpu->driver_version;
  return with_device_lock(std::unique_ptr<TestHandler>(new TestHandler(
      std::move(options), std::move(worker), std::move(nvml).value(), std::move(gpu).value(), std::move(claim))));
}

bool TestHandler::recheck_confinement() {
  std::lock_guard lock(confinement_mu_);
  if (confined_.load()) return true;
  if (!options_.confine || monotonic_s() - confinement_checked_at_ < kRecheckConfinementS) return false;
  confinement_ = check_confinement(policy_);
  confinement_checked_at_ = monotonic_s();
  if (!confinement_.is_ok()) return false;
  spdlog::info("tester: confinement works now; candidates run confined from here on");
  confined_ = true;
  return true;
}

proto::Capabilities TestHandler::capabilities() const {
  proto::Capabilities caps;
  caps.backend = std::string(proto::name(options_.backend));
  caps.gpu_name = worker_.device_name;  // the device this tester measures on: the GPU, or the CPU model
  caps.gpu_uuid = worker_.gpu_uuid;
  caps.arch = options_.backend == proto::Backend::kCuda ? gpu_.arch() : host_arch();
  caps.host = worker_.host;
  const Status confinement = this->confinement();
  caps.confinement = confinement.is_ok()                              ? "confined"
                     : options_.allow_unconfined || !options_.confine ? "UNCONFINED: " + confinement.message()
                                                                      : "refuses to evaluate: " + confinement.message();
  return caps;
}

void TestHandler::start_gpu_monitor(std::shared_ptr<prometheus::Registry> registry) {
  if (nvml_ && registry && !monitor_) monitor_ = std::make_shared<GpuMonitor>(nvml_, gpu_, std::move(registry));
}

std::vector<std::string> TestHandler::eval_argv(const char* result_file, double screen_below) const {
  const auto& t = options_.timing;
  std::vector<std::string> argv = {confined() ? policy_.eval_binary_in_child() : options_.eval_binary,
                                   "--task",
                                   kTaskDir,
                                   "--kernel",
                                   kKernelFile,
                                   "--reference",
                                   kReferenceFile,
                                   "--out",
                                   result_file,
                                   "--mode",
                                   t.mode,
                                   "--min-samples",
                                   std::to_string(t.min_samples),
                                   "--min-time",
                                   number(t.min_time_s),
                                   "--max-time",
                                   number(t.max_time_s),
                                   "--max-noise",
                                   number(t.max_noise),
                                   "--warmup",
                                   std::to_string(t.warmup_iters),
                                   "--precision",
                                   number(t.precision),
                                   "--report-key",
                                   kReportKeyFile};
  if (!options_.python.empty()) {
    argv.push_back("--python");
    argv.push_back(options_.python);
  } else {
    argv.push_back("--no-torch-baselines");
  }
  if (!device_lock_.empty()) {
    argv.push_back("--device-lock");
    argv.push_back(confined() ? policy_.lock_file_in_child(device_lock_) : device_lock_);
  }
  argv.push_back("--settle-calls");  // 0 too: the evaluator's own default is to settle
  argv.push_back(std::to_string(t.settle_calls));
  if (screen_below > 0) {
    argv.push_back("--screen-below");
    argv.push_back(number(screen_below));
  }
  return argv;
}

sandbox::SandboxOptions TestHandler::child_sandbox(const std::string& scratch, std::vector<std::string> argv,
                                                   double timeout_s, int slot) const {
  sandbox::SandboxOptions run;
  run.argv = std::move(argv);
  run.working_dir = scratch;
  run.env = {"PATH=/usr/bin:/bin", "HOME=" + scratch, "TMPDIR=" + scratch, "LC_ALL=C"};
  // Where the tester itself found its shared libraries (a deployment that ships them beside Kiln); it is
  // no secret, and the child is built from the same tree.
  if (confined()) {
    if (std::string lib = policy_.library_path_in_child(); !lib.empty()) run.env.push_back("LD_LIBRARY_PATH=" + lib);
  } else if (const char* lib_path = std::getenv("LD_LIBRARY_PATH"); lib_path && *lib_path) {
    run.env.push_back(std::string("LD_LIBRARY_PATH=") + lib_path);
  }
  run.timeout_s = timeout_s;
  run.cpu_time_s = options_.cpu_time_limit_s;
  if (options_.backend == proto::Backend::kCuda) {
    // The child sees exactly this tester's GPU, by uuid (indices differ between NVML and CUDA orderings).
    run.env.push_back("CUDA_VISIBLE_DEVICES=" + gpu_.uuid);
  } else if (options_.memory_limit_mb > 0) {
    // Not for CUDA: its context reserves far more address space than it uses, so RLIMIT_AS breaks it.
    run.address_space_bytes = options_.memory_limit_mb << 20;
  }
  run.file_size_bytes = kMaxChildFileBytes;
  run.max_output_bytes = options_.max_log_bytes;
  run.isolate_network = true;
  // Both children fork one runner per contestant and each runner confines itself before loading a kernel
  // (no new processes, signals to itself only), so process creation is refused to the candidate there
  // rather than here. Unconfined (tester.allow_unconfined, or TesterOptions::confine off), the CPU child
  // may not write outside its scratch directory and the CUDA child keeps a writable root: the sandbox's
  // plain read-only root leaves /proc read-only, where the CUDA runtime names its threads. Confined, both
  // get the confinement's read-only root, whose /proc stays writable.
  run.readonly_root = options_.readonly_root.value_or(options_.backend == proto::Backend::kCpu);
  run.deny_process_creation = options_.deny_process_creation.value_or(false);
  // Confined, the sandbox gives the child a read-only root with private /tmp and /dev/shm, its own uid
  // (or user namespace) and nothing of Kiln's files, and never falls back (confinement.h).
  if (confined()) run.confine = policy_.for_slot(slot);
  if (slot >= 0 && static_cast<size_t>(slot) < slot_cores_.size()) {
    run.cpu_affinity = slot_cores_[static_cast<size_t>(slot)];
  } else {
    for (int64_t core : options_.pin_cores) run.cpu_affinity.push_back(static_cast<int>(core));
  }
  if (options_.backend == proto::Backend::kCpu)
    for (std::string& var : openmp_env(run.cpu_affinity)) run.env.push_back(std::move(var));
  return run;
}

Result<TestHandler::Scratch> TestHandler::make_scratch(const ScratchFiles& files, int slot) const {
  Scratch scratch;
  KILN_RETURN_IF_ERROR(
      write_request_files(scratch.dir.path(), *files.task_files, *files.kernel_so, *files.reference_so));
  KILN_ASSIGN_OR_RETURN(scratch.key, write_report_key(scratch.dir.path()));
  // As root the child runs as the slot's own ids, which must own the folder it works in.
  if (confined() && sandbox::can_map_other_ids()) {
    const uint32_t id = policy_.uid_for_slot(slot);
    KILN_RETURN_IF_ERROR(give_scratch(scratch.dir.path(), id, id));
  }
  return scratch;
}

void TestHandler::profile(const ScratchFiles& files, proto::TestReport& report, const ProfileChoice& choice,
                          int slot) const {
  if (options_.backend != proto::Backend::kCuda || options_.profile != "ncu" ||
      report.status != proto::test_status::kOk)
    return;
  const double start = monotonic_s();
  auto skipped = [&](const std::string& why) {
    report.profile_summary = "profiling skipped: " + why;
    append_log_line(report, report.profile_summary);
  };
  if (std::string why = why_not_profiled(report, choice); !why.empty()) return skipped(why);
  if (::access(options_.ncu.c_str(), X_OK) != 0) return skipped("no ncu at " + options_.ncu);
  // A scratch folder of its own: the measured run's candidate had the other one to itself, and nothing
  // it may have left there (a link where a file will be written or read) reaches this run.
  // Only a report the child signed is read for the profiled process.
  auto made = make_scratch(files, slot);
  if (!made.is_ok()) return skipped(made.status().message());
  const Scratch fresh = std::move(made).value();
  const std::string& scratch = fresh.dir.path();
  const std::string* key = &fresh.key;
  std::vector<std::string> argv = eval_argv(kProfileResultFile);
  argv.push_back("--profile");
  const std::string csv = std::string(kProfileCsvFile);
  sandbox::SandboxOptions run = child_sandbox(scratch, cuda::ncu_argv(options_.ncu, csv, kProfileMaxKernels, argv),
                                              options_.profile_timeout_s, slot);
  // One Nsight Compute session per GPU at a time: two at once (this tester's slots) make one fail.
  auto ncu_lock = eval::DeviceLock::open(device_lock_.empty() ? std::string() : device_lock_ + ".ncu");
  if (!ncu_lock.is_ok()) return skipped(ncu_lock.status().message());
  auto hold = ncu_lock->hold(eval::DeviceLock::Mode::kExclusive);
  if (!hold.is_ok()) return skipped(hold.status().message());
  Result<sandbox::SandboxResult> child = unavailable("not run");
  for (int attempt = 1; attempt <= kProfileAttempts; ++attempt) {
    child = sandbox::run_sandboxed(run);
    if (!child.is_ok()) return skipped(child.status().message());
    if (child->succeeded()) break;
    const std::string out = child->stdout_text + child->stderr_text;
    // ncu's own reason, named: no permission for the counters (ERR_NVGPUCTRPERM), or its ==ERROR== lines.
    std::string why = cuda::ncu_errors(out);
    if (out.find("ERR_NVGPUCTRPERM") != std::string::npos)
      why = "ncu may not read the GPU's performance counters here (ERR_NVGPUCTRPERM)";
    why = child->describe(run.timeout_s) + (why.empty() ? "" : ": " + why);
    if (attempt == kProfileAttempts || child->timed_out || !cuda::ncu_failure_is_transient(out)) {
      return skipped(attempt > 1 ? why + " (after " + std::to_string(attempt) + " tries)" : why);
    }
    append_log_line(report, "profiling: ncu failed (" + why + "); trying once more");
  }
  auto profiled = read_signed_report(scratch, kProfileResultFile, *key);
  if (!profiled.is_ok()) return skipped("the profiling run: " + profiled.status().message());
  if (profiled->status != proto::test_status::kOk) return skipped("the profiling run failed: " + profiled->message);
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

Result<proto::TestReport> TestHandler::evaluate(const proto::TestRequest& request) {
  const double start = monotonic_s();
  proto::TestReport report;
  proto::ProcessResult process;  // the child's run, once there was one
  std::map<std::string, std::string> metadata = run_metadata_;
  auto finish = [&](proto::TestReport r) {
    if (r.worker.device_name.empty()) r.worker = worker_;
    r.worker.worker_id = options_.worker_id;
    r.duration_s = monotonic_s() - start;
    r.process = process;
    r.metadata = metadata;
    return r;
  };
  auto failed = [&](std::string_view status, std::string message, std::string log = {}) {
    proto::TestReport r;
    r.status = std::string(status);
    r.message = std::move(message);
    r.log = std::move(log);
    return finish(std::move(r));
  };

  // Whose fault each failure is, for messaging::outcome_for: a task package that does not parse, or one
  // routed to the wrong backend, is the job's, permanently; trouble running the evaluation here is this
  // worker's. Neither is the candidate's: its own failures are reports.
  if (!std::isfinite(request.screen_below) || request.screen_below < 0) {
    return messaging::job_fault(
        invalid_argument("tester: screen_below must be a finite number >= 0, got " + number(request.screen_below)));
  }

  auto resolved = tasks_->resolve(request.task_blob, request.files);
  if (!resolved.is_ok()) return resolved.status().with_context("tester: task");
  const std::shared_ptr<const service::TaskPackage> package = std::move(resolved).value();
  auto reference = tasks_->content(request.reference_blob, request.reference_so.data);
  if (!reference.is_ok()) return reference.status().with_context("tester: reference");
  const std::shared_ptr<const std::string> reference_so = std::move(reference).value();
  auto kernel_so = proto::kernel_library(request, kMaxLibraryBytes);
  if (!kernel_so.is_ok()) return messaging::job_fault(kernel_so.status()).with_context("tester: kernel library");
  const task::TaskSpec* spec = &package->spec;
  if (spec->backend != options_.backend) {
    return failed_precondition("tester: the task's backend is " + std::string(proto::name(spec->backend)) +
                               ", this tester runs " + std::string(proto::name(options_.backend)));
  }

  if (spec->torch_reference() && options_.python.empty()) {
    return unavailable("tester: the task runs a PyTorch module (" + spec->reference_file +
                       "), and this tester has no Python with torch: " + options_.python_missing);
  }
  // What the speedup is against: a PyTorch reference is what a user runs (eager mode).
  if (spec->torch_reference()) metadata["reference"] = "torch_eager";
  if (needs_torch(*spec) && !options_.python.empty()) metadata["torch"] = options_.python_torch_version;
  // The torch baselines of a task with a C reference are left out where there is no torch: said, not hidden.
  if (needs_torch(*spec) && options_.python.empty())
    metadata["baselines_left_out"] = "torch_eager, torch_compile: " + options_.python_missing;

  // Fail closed: a candidate is never run unconfined unless the tester was told it may be.
  if (!confined() && options_.confine && !options_.allow_unconfined && !recheck_confinement()) {
    return unavailable("tester: cannot confine the candidate here, so it is not evaluated: " + confinement().message() +
                       " (tester.allow_unconfined: 1 runs candidates unconfined, for "
                       "development only)");
  }

  // A confirmation is measured in full; a first measurement may be screened.
  const std::string_view program_id = request.cand.program_id;
  const bool confirmation = request.purpose == "confirm" || proto::program_id::confirmed(program_id).has_value();
  // The bar is the highest of this tester's (the promotion bar at most), the campaign's (its best when the
  // candidate was proposed) and the campaign's best this tester has measured since.
  const std::string& campaign = request.cand.campaign_id;
  const double seen = options_.screen_by_best && !confirmation ? seen_bars_.bar(campaign) : 0;
  // The bar the request carries came through the scorer's store; the same kernel's bound measured here may
  // differ from it in the last digits. Only a bar clearly above it is this tester's own.
  const bool fresher = seen > request.screen_below * (1 + 1e-6);
  const double screen_below =
      confirmation ? 0 : std::max({options_.timing.screen_below, request.screen_below, fresher ? seen : 0.0});
  if (screen_below > 0) {
    metadata["timing_screen_below"] = short_number(screen_below);
    metadata["timing_screen_by"] = screen_below == options_.timing.screen_below ? "tester"
                                   : screen_below == request.screen_below       ? "campaign best"
                                                                                : "campaign best measured here";
  }
  // With several slots, this evaluation's own cores: another slot's host work must not delay the launches
  // of a case being timed here (CUDA-event intervals would stretch with them).
  const int slot = take_slot();
  struct SlotHold {
    TestHandler* h;
    int slot;
    ~SlotHold() { h->give_slot(slot); }
  } slot_hold{this, slot};
  if (slot >= 0 && static_cast<size_t>(slot) < slot_cores_.size()) {
    metadata["slot"] = std::to_string(slot);
    std::string cores;
    for (int c : slot_cores_[static_cast<size_t>(slot)]) cores += (cores.empty() ? "" : ",") + std::to_string(c);
    metadata["slot_cores"] = cores;
  }
  const ScratchFiles files{&package->files, &*kernel_so, reference_so.get()};
  auto made = make_scratch(files, slot);
  if (!made.is_ok()) return messaging::worker_fault(made.status()).with_context("tester: scratch dir");
  const Scratch scratch_files = std::move(made).value();
  const TempDir& scratch = scratch_files.dir;
  const std::string& key = scratch_files.key;

  sandbox::SandboxOptions run =
      child_sandbox(scratch.path(), eval_argv(kResultFile, screen_below), options_.timeout_s, slot);
  auto ran = sandbox::run_sandboxed(run);
  if (!ran.is_ok()) return messaging::worker_fault(ran.status()).with_context("tester: evaluation child");
  sandbox::SandboxResult child = std::move(ran).value();

  const std::string log_tail = tail(child.stderr_text + child.stdout_text, options_.max_log_bytes);
  const auto [out_budget, err_budget] =
      proto::stream_budgets(child.stdout_text.size(), child.stderr_text.size(), options_.max_log_bytes);
  metadata["isolation_network"] = child.network_isolation;
  metadata["isolation_pids"] = child.pid_isolation;
  metadata["isolation_filesystem"] = child.filesystem_isolation;
  metadata["isolation_user"] =
      child.user_isolation + (child.child_uid >= 0 ? " uid " + std::to_string(child.child_uid) : std::string());
  // Every verdict an unconfined candidate earns says so, first in its log.
  auto warn_unconfined = [&](std::string text) {
    return confined() ? text : std::string(kUnconfinedWarning) + "\n" + text;
  };
  const std::string log = warn_unconfined(log_tail);
  process.returncode = child.returncode();
  process.stdout_text = tail(child.stdout_text, out_budget);
  process.stderr_text = tail(child.stderr_text, err_budget);
  if (!child.succeeded()) process.message = child.describe(run.timeout_s);
  if (child.timed_out) {
    return failed(proto::test_status::kTimedOut, "timed out after " + sandbox::format_seconds(run.timeout_s), log);
  }
  if (child.term_signal != 0) {
    return failed(proto::test_status::kCrashed, "crashed: " + sandbox::signal_description(child.term_signal), log);
  }
  if (child.exit_code != 0) {
    return failed(proto::test_status::kCrashed, "crashed: exit code " + std::to_string(child.exit_code), log);
  }
  auto signed_report = read_signed_report(scratch.path(), kResultFile, key);
  if (!signed_report.is_ok())
    return failed(proto::test_status::kCrashed, "crashed: " + signed_report.status().message(), log);
  report = std::move(signed_report).value();
  // The evaluator's account of where its time went ("eval_correctness_s", "eval_measure_s"); the rest of
  // the metadata is the tester's own.
  for (const auto& [k, v] : report.metadata) {
    if (k.rfind("eval_", 0) == 0) metadata[k] = v;
  }
  metadata["eval_child_s"] = short_number(child.wall_s);
  if (report.status == proto::test_status::kEvaluatorError) {
    // kiln-eval says, in a report it signed, that it could not evaluate here: not the candidate's verdict.
    return unavailable("the evaluator could not evaluate: " + report.message);
  }
  report.log = log;
  if (options_.screen_by_best && !confirmation) seen_bars_.record(campaign, report);
  profile(files, report,
          {.scope = options_.profile_scope,
           .bar = screen_below,
           .confirmation = confirmation,
           .wanted = request.want_profile},
          slot);
  return finish(std::move(report));
}

void TestHandler::start_metrics(prometheus::Registry& registry) {
  evaluations_ = &prometheus::BuildCounter()
                      .Name("kiln_tester_evaluations_total")
                      .Help(
                          "Evaluations by this tester, by device and status (error: given back or dead-lettered, "
                          "not scored)")
                      .Register(registry);
  // Every status at zero from the start, so rates exist before the first of each kind.
  for (std::string_view s : kCountedStatuses)
    evaluations_->Add({{"device", worker_.device_name}, {"status", std::string(s)}});
  busy_seconds_ = &prometheus::BuildCounter()
                       .Name("kiln_tester_busy_seconds_total")
                       .Help("Wall time spent evaluating (correctness, timing, profiling), by device")
                       .Register(registry)
                       .Add({{"device", worker_.device_name}});
  timing_seconds_ = &prometheus::BuildCounter()
                         .Name("kiln_tester_timing_seconds_total")
                         .Help(
                             "Wall time of timing rounds (the device busy with a candidate and its reference, "
                             "nothing else), by device: its rate over kiln_tester_busy_seconds_total's is the "
                             "share of evaluation time spent measuring")
                         .Register(registry)
                         .Add({{"device", worker_.device_name}});
}

messaging::JobOutcome TestHandler::handle(const proto::Job& job) {
  auto request = proto::decode<proto::TestRequest>(job.payload.data);
  if (!request.is_ok()) {
    return messaging::JobOutcome::from_status(
        messaging::job_fault(request.status()).with_context("test: bad TestRequest"));
  }
  Result<proto::TestReport> report = internal_error("not run");
  const double started = monotonic_s();
  try {
    report = evaluate(*request);
  } catch (const std::exception& e) {
    report = messaging::worker_fault(internal_error(e.what()));  // out of memory or disk, here
  }
  if (evaluations_ != nullptr) {
    busy_seconds_->Increment(monotonic_s() - started);
    if (report.is_ok())
      for (const proto::CaseTiming& c : report->performance.cases)
        timing_seconds_->Increment(std::max(c.timing_s, 0.0));
    std::string status = report.is_ok() ? report->status : "error";
    if (std::find(kCountedStatuses.begin(), kCountedStatuses.end(), status) == kCountedStatuses.end()) status = "other";
    evaluations_->Add({{"device", worker_.device_name}, {"status", status}}).Increment();
  }
  // Trouble that is not the candidate's is never scored: this worker's is given back (another attempt may do
  // better), the task's is dead-lettered; either way, in the end, the scorer records the candidate as not
  // evaluated, with this cause.
  if (!report.is_ok()) return messaging::JobOutcome::from_status(report.status().with_context("test"));

  proto::ScoreResult result;
  result.cand = request->cand;
  result.stage = std::string(proto::name(proto::Stage::kTest));
  result.purpose = request->purpose;
  result.build = request->build;
  result.test = std::move(report).value();
  const std::string& pid = request->cand.program_id;
  std::string score_job = request->purpose == "confirm" ? proto::job_id::score_confirm(pid) : proto::job_id::score(pid);
  const std::string verdict = result.test.status;
  const std::string message = result.test.message;
  std::vector<proto::FollowUp> next{
      proto::FollowUp{std::string(proto::svc::kScore), std::move(score_job), {proto::encode(result)}, 0}};
  if (verdict == proto::test_status::kOk) return messaging::JobOutcome::ok(std::move(next));
  // Wrong, crashed, too slow to finish, would not load: the candidate's own failure, scored against it.
  return messaging::JobOutcome::from_status(invalid_argument("test: " + (message.empty() ? verdict : message)),
                                            [&](const Status&) { return std::move(next); });
}

Result<service::ServiceHandlers> make_test_handlers(const service::ServiceContext& ctx) {
  if (!ctx.config) return invalid_argument("tester: no config");
  KILN_ASSIGN_OR_RETURN(TesterOptions options, options_from_config(ctx.config->tester));
  options.worker_id = ctx.worker_id;
  options.lock_dir = ctx.state_dir + "/locks";
  options.hidden_paths = kiln_private_paths(*ctx.config, ctx.state_dir, own_home());
  const int slots = static_cast<int>(std::max<int64_t>(1, options.slots));
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<TestHandler> handler, TestHandler::create(std::move(options)));
  if (ctx.tasks) handler->set_task_source(ctx.tasks);
  handler->start_gpu_monitor(ctx.metrics);
  if (ctx.metrics) handler->start_metrics(*ctx.metrics);
  service::ServiceHandlers h;
  h.job = [handler](const proto::Job& job) { return handler->handle(job); };
  h.caps = handler->capabilities();
  // One evaluation at a time unless tester.slots says more (cuda): those take turns on the device.
  h.slots = slots;
  h.service = handler->service();
  return h;
}

}  // namespace kiln::tester
