#include "child.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "kiln/core/hash.h"
#include "kiln/eval/tool.h"

namespace kiln::tester {
namespace {

// Names inside the scratch directory of one evaluation.
constexpr const char* kTaskDir = "task";
constexpr const char* kKernelFile = "kernel.so";
constexpr const char* kReferenceFile = "reference.so";
// The key that authenticates the child's report; the child reads and removes it before any candidate
// code runs.
constexpr const char* kReportKeyFile = "report.key";
constexpr size_t kReportKeyBytes = 32;
// The child writes a report of a few kB; this only stops a candidate filling the disk.
constexpr int64_t kMaxChildFileBytes = 256ll << 20;

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

}  // namespace

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string short_number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string tail(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t cut = text.size() - max_bytes;
  size_t eol = text.find('\n', cut);
  if (eol != std::string::npos && eol + 1 < text.size()) cut = eol + 1;
  return "[... " + std::to_string(cut) + " bytes dropped]\n" + text.substr(cut);
}

Result<std::string> read_child_file(const std::string& path, size_t max_bytes) {
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

void append_log_line(proto::TestReport& report, const std::string& line) {
  report.log += (report.log.empty() || report.log.back() == '\n' ? "" : "\n") + line + "\n";
}

std::vector<std::string> EvalChild::argv(const char* result_file, double screen_below) const {
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

sandbox::SandboxOptions EvalChild::sandbox(const std::string& scratch, std::vector<std::string> argv, double timeout_s,
                                           int slot) const {
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
  if (!slots_.cores(slot).empty()) {
    run.cpu_affinity = slots_.cores(slot);
  } else {
    for (int64_t core : options_.pin_cores) run.cpu_affinity.push_back(static_cast<int>(core));
  }
  if (options_.backend == proto::Backend::kCpu)
    for (std::string& var : openmp_env(run.cpu_affinity)) run.env.push_back(std::move(var));
  return run;
}

Result<Scratch> EvalChild::make_scratch(const ScratchFiles& files, int slot) const {
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

}  // namespace kiln::tester
