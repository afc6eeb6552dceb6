#include "kiln/sandbox/sandbox.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <poll.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "filters.h"
#include "kiln/core/time.h"
#include "kiln/log/log.h"
#include "supervisor.h"
#include "unique_fd.h"

namespace kiln::sandbox {
namespace {

using detail::ChildPlan;
using detail::Pipe;
using detail::UniqueFd;

// After the leader is gone, how long stray holders of the output pipes may keep them open before the
// parent stops reading. Only a process that left the group (setsid) can still hold them.
constexpr double kDrainAfterExitS = 1.0;
// Upper bound of one poll() wait, so a missed wakeup costs at most this much latency.
constexpr int kMaxPollWaitMs = 50;
// The supervisor enforces the timeout itself; the caller kills it only if it overruns by this much.
constexpr double kSupervisorGraceS = 5.0;

Result<Pipe> make_pipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return internal_error(std::string("pipe2: ") + std::strerror(errno));
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

std::string env_value(const std::vector<std::string>& env, std::string_view key) {
  for (const auto& kv : env) {
    if (kv.size() > key.size() && kv.compare(0, key.size(), key) == 0 && kv[key.size()] == '=') {
      return kv.substr(key.size() + 1);
    }
  }
  return {};
}

Result<std::string> resolve_executable(const std::string& name, const std::vector<std::string>& env) {
  if (name.empty()) return invalid_argument("sandbox: empty argv[0]");
  if (name.find('/') != std::string::npos) {
    if (access(name.c_str(), X_OK) != 0) {
      return not_found("sandbox: cannot execute '" + name + "': " + std::strerror(errno));
    }
    return name;
  }
  std::string path = env_value(env, "PATH");
  if (path.empty()) path = "/usr/local/bin:/usr/bin:/bin";
  std::stringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    std::string candidate = dir + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return not_found("sandbox: '" + name + "' not found in PATH " + path);
}

// Keeps the head and the tail of a stream within a byte budget; the middle is counted, not kept.
class StreamCapture {
 public:
  explicit StreamCapture(size_t max_bytes) : head_max_(max_bytes / 2), tail_max_(max_bytes - max_bytes / 2) {}

  void append(const char* data, size_t n) {
    size_t to_head = std::min(n, head_max_ - head_.size());
    head_.append(data, to_head);
    data += to_head;
    n -= to_head;
    if (n == 0) return;
    tail_.append(data, n);
    // Trim lazily so a flood costs amortized O(1) per byte.
    if (tail_.size() > 2 * tail_max_ + 4096) trim_tail();
  }

  std::string finish() {
    trim_tail();
    if (dropped_ == 0) return head_ + tail_;
    return head_ + "\n[... " + std::to_string(dropped_) + " bytes dropped]\n" + tail_;
  }

 private:
  void trim_tail() {
    if (tail_.size() <= tail_max_) return;
    size_t cut = tail_.size() - tail_max_;
    dropped_ += cut;
    tail_.erase(0, cut);
  }

  size_t head_max_, tail_max_;
  std::string head_, tail_;
  size_t dropped_ = 0;
};

// Reads what is available; returns false at end of stream.
bool drain_once(int fd, StreamCapture& capture) {
  char buf[65536];
  ssize_t n = ::read(fd, buf, sizeof buf);
  if (n > 0) {
    capture.append(buf, static_cast<size_t>(n));
    return true;
  }
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  return false;
}

// `path` made absolute and real (symbolic links resolved); empty when it does not exist.
std::string real_path(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) return {};
  return buf;
}

bool is_under(const std::string& path, const std::string& dir) {
  if (dir == "/") return true;
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/');
}

// Confinement, checked and resolved before fork: the ids, the real paths to cover and to mount.
Result<detail::ConfinePlan> plan_confinement(const Confinement& c, const std::string& working_dir) {
  detail::ConfinePlan p;
  p.on = true;
  const bool privileged = can_map_other_ids();
  p.uid = privileged && c.uid != 0 ? c.uid : geteuid();
  p.gid = privileged && c.gid != 0 ? c.gid : getegid();
  p.user_namespace = !privileged;
  p.uid_map = std::to_string(p.uid) + " " + std::to_string(p.uid) + " 1\n";
  p.gid_map = std::to_string(p.gid) + " " + std::to_string(p.gid) + " 1\n";
  p.tmp_options = "size=" + std::to_string(std::max<int64_t>(c.tmp_bytes, 1 << 20)) + ",mode=1777";
  auto add_bind = [&](const std::string& outside, const std::string& inside, bool writable) -> Status {
    std::string real = real_path(outside);
    if (real.empty()) return not_found("sandbox: confinement: cannot bind " + outside + ": " + std::strerror(errno));
    if (inside.empty() || inside[0] != '/' || inside.find("/../") != std::string::npos)
      return invalid_argument("sandbox: confinement: bind target must be an absolute path, got '" + inside + "'");
    struct stat st {};
    if (::stat(real.c_str(), &st) != 0) return not_found("sandbox: confinement: cannot stat " + real);
    p.binds.push_back({real, inside, S_ISDIR(st.st_mode), writable, -1});
    return Status::ok();
  };
  if (!working_dir.empty()) {
    // The working directory stays at its own path (it is usually under /tmp, which the child gets afresh).
    std::string real = real_path(working_dir);
    if (real.empty()) return not_found("sandbox: confinement: no working directory " + working_dir);
    KILN_RETURN_IF_ERROR(add_bind(real, real, true));
  }
  for (const auto& b : c.binds) KILN_RETURN_IF_ERROR(add_bind(b.outside, b.inside, b.writable));
  for (const auto& h : c.hidden) {
    std::string real = real_path(h);
    if (real.empty()) continue;  // nothing there to see
    if (real == "/") return invalid_argument("sandbox: confinement: cannot hide the root");
    if (is_under(real, "/tmp") && real != "/tmp") continue;  // gone with the private /tmp
    for (const auto& b : p.binds) {
      // A bind whose place lies under a cover could not be mounted there (the cover is read-only).
      if (is_under(b.inside, real))
        return invalid_argument("sandbox: confinement: " + b.inside + " lies under hidden " + real);
    }
    struct stat st {};
    if (::stat(real.c_str(), &st) != 0) continue;
    p.hidden.push_back({real, S_ISDIR(st.st_mode)});
  }
  // A path under a hidden folder is gone with it (and could not be covered again under its cover).
  std::vector<detail::HiddenPlan> outer;
  for (const auto& h : p.hidden) {
    const bool nested = std::any_of(p.hidden.begin(), p.hidden.end(), [&](const detail::HiddenPlan& o) {
      return o.is_dir && o.path != h.path && is_under(h.path, o.path);
    });
    const bool repeated = std::any_of(outer.begin(), outer.end(), [&](const auto& o) { return o.path == h.path; });
    if (!nested && !repeated) outer.push_back(h);
  }
  p.hidden = std::move(outer);
  return p;
}

void log_seccomp_fallback_once() {
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true)) {
    spdlog::warn(
        "sandbox: network namespaces are not permitted here; children get a seccomp filter "
        "refusing AF_INET/AF_INET6/AF_PACKET sockets instead");
  }
}

}  // namespace

bool can_map_other_ids() {
  if (geteuid() != 0) return false;
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  auto has = [&](int cap) { return (data[cap / 32].effective & (1u << (cap % 32))) != 0; };
  return has(CAP_SETUID) && has(CAP_SETGID);
}

std::string signal_description(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGCHLD: return "SIGCHLD";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGSYS: return "SIGSYS";
    default: return "signal " + std::to_string(sig);
  }
}

std::string format_seconds(double s) {
  char buf[64];
  if (std::fabs(s - std::round(s)) < 1e-9) {
    std::snprintf(buf, sizeof buf, "%.0f s", s);
  } else {
    std::snprintf(buf, sizeof buf, "%g s", s);
  }
  return buf;
}

std::string SandboxResult::describe(double timeout_s) const {
  if (timed_out) return "timed out after " + format_seconds(timeout_s);
  if (term_signal != 0) return "killed by " + signal_description(term_signal);
  return "exit code " + std::to_string(exit_code);
}

Result<SandboxResult> run_sandboxed(const SandboxOptions& options) {
  if (options.argv.empty()) return invalid_argument("sandbox: empty argv");
  if (!(options.timeout_s > 0)) return invalid_argument("sandbox: timeout_s must be positive");
  std::string exe;
  if (options.confine) {
    // A program inside a bind is named by its place inside; check it where it lies outside.
    for (const auto& b : options.confine->binds) {
      if (!is_under(options.argv[0], b.inside)) continue;
      const std::string outside = b.outside + options.argv[0].substr(b.inside.size());
      if (access(outside.c_str(), X_OK) != 0)
        return not_found("sandbox: cannot execute '" + outside + "': " + std::strerror(errno));
      exe = options.argv[0];
    }
  }
  if (exe.empty()) {
    KILN_ASSIGN_OR_RETURN(exe, resolve_executable(options.argv[0], options.env));
  }

  ChildPlan plan;
  plan.exe = exe;
  std::vector<std::string> argv_storage = options.argv;
  std::vector<std::string> env_storage = options.env;
  for (auto& a : argv_storage) plan.argv.push_back(a.data());
  plan.argv.push_back(nullptr);
  for (auto& e : env_storage) plan.envp.push_back(e.data());
  plan.envp.push_back(nullptr);
  if (!options.working_dir.empty()) plan.working_dir = options.working_dir.c_str();

  plan.rlimits.emplace_back(RLIMIT_CORE, 0);
  if (options.cpu_time_s > 0) plan.rlimits.emplace_back(RLIMIT_CPU, static_cast<rlim_t>(options.cpu_time_s));
  if (options.address_space_bytes > 0) {
    plan.rlimits.emplace_back(RLIMIT_AS, static_cast<rlim_t>(options.address_space_bytes));
  }
  if (options.file_size_bytes > 0) {
    plan.rlimits.emplace_back(RLIMIT_FSIZE, static_cast<rlim_t>(options.file_size_bytes));
  }
  if (options.max_processes > 0) {
    plan.rlimits.emplace_back(RLIMIT_NPROC, static_cast<rlim_t>(options.max_processes));
  }
  if (!options.cpu_affinity.empty()) {
    plan.set_affinity = true;
    CPU_ZERO(&plan.affinity);
    for (int core : options.cpu_affinity) {
      if (core < 0 || core >= CPU_SETSIZE) {
        return invalid_argument("sandbox: cpu core " + std::to_string(core) + " out of range");
      }
      CPU_SET(core, &plan.affinity);
    }
  }
  std::vector<sock_filter> filter = detail::network_filter();
  plan.isolate_network = options.isolate_network;
  plan.force_seccomp = options.force_seccomp_network;
  plan.filter_prog.len = static_cast<unsigned short>(filter.size());
  plan.filter_prog.filter = filter.data();
  plan.guard = detail::guard_filter(getpid(), getpgrp(), options.deny_process_creation);
  plan.readonly_root = options.readonly_root;
  plan.drop_capabilities = options.drop_capabilities;
  if (options.confine) {
    KILN_ASSIGN_OR_RETURN(plan.confine, plan_confinement(*options.confine, options.working_dir));
    plan.isolate_network = true;
    plan.readonly_root = true;
    plan.drop_capabilities = true;
    plan.force_seccomp = false;
    if (!options.working_dir.empty()) plan.working_dir = plan.confine.binds.front().inside.c_str();
  }
  plan.timeout_s = options.timeout_s;

  UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null.valid()) return internal_error(std::string("sandbox: /dev/null: ") + std::strerror(errno));
  KILN_ASSIGN_OR_RETURN(Pipe out_pipe, make_pipe());
  KILN_ASSIGN_OR_RETURN(Pipe err_pipe, make_pipe());
  KILN_ASSIGN_OR_RETURN(Pipe status_pipe, make_pipe());
  plan.stdin_fd = dev_null.get();
  plan.stdout_fd = out_pipe.write.get();
  plan.stderr_fd = err_pipe.write.get();
  plan.status_fd = status_pipe.write.get();
  plan.parent_pid = getpid();

  const double start = monotonic_s();
  pid_t pid = -1;
  if (plan.confine.on) {
    // The supervisor as init of a new PID namespace (inside a new user namespace unless we may take the
    // sandbox's ids ourselves); no fallback.
    const unsigned long flags = SIGCHLD | CLONE_NEWPID | (plan.confine.user_namespace ? CLONE_NEWUSER : 0);
    pid = static_cast<pid_t>(syscall(SYS_clone, flags, nullptr, nullptr, nullptr, nullptr));
    if (pid < 0)
      return failed_precondition(std::string("sandbox: confinement: cannot create a ") +
                                 (plan.confine.user_namespace ? "user and " : "") +
                                 "PID namespace here: " + std::strerror(errno));
    plan.in_pid_namespace = true;
  } else if (options.isolate_pids) {
    // Like fork, with the supervisor as init of a new PID namespace; refused without CAP_SYS_ADMIN.
    pid = static_cast<pid_t>(syscall(SYS_clone, SIGCHLD | CLONE_NEWPID, nullptr, nullptr, nullptr, nullptr));
    if (pid >= 0) plan.in_pid_namespace = true;
  }
  if (pid < 0) pid = fork();
  if (pid < 0) return unavailable(std::string("sandbox: fork: ") + std::strerror(errno));
  if (pid == 0) detail::run_supervisor(plan);

  // Set the group from this side too, so a kill below cannot race the supervisor's own setpgid.
  setpgid(pid, pid);
  out_pipe.write.reset();
  err_pipe.write.reset();
  status_pipe.write.reset();
  dev_null.reset();

  SandboxResult result;
  result.pid_isolation = plan.in_pid_namespace ? "pidns" : "subreaper";
  // The child's setup message (or failure), then the supervisor's report; EOF when the supervisor is gone.
  std::string status_bytes;
  bool status_open = true;
  auto read_status = [&]() {
    char buf[64];
    ssize_t n = ::read(status_pipe.read.get(), buf, sizeof buf);
    if (n > 0)
      status_bytes.append(buf, static_cast<size_t>(n));
    else if (n == 0 || errno != EINTR)
      status_open = false;
  };
  auto setup_complete = [&]() {
    if (status_bytes.empty()) return false;
    size_t need = status_bytes[0] == detail::kFailureTag ? detail::kFailureBytes
                  : status_bytes[0] == detail::kSetupTag ? detail::kSetupBytes
                                                         : detail::kReportBytes;
    return status_bytes.size() >= need;
  };
  while (status_open && !setup_complete()) read_status();

  if (!status_bytes.empty() && status_bytes[0] == detail::kFailureTag && setup_complete()) {
    int err = 0;
    std::memcpy(&err, status_bytes.data() + 2, sizeof(int));
    auto step = static_cast<uint8_t>(status_bytes[1]);
    kill(pid, SIGKILL);
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    std::string what = std::string(plan.confine.on ? "sandbox: confinement: " : "sandbox: ") + detail::step_name(step) +
                       " failed for '" + options.argv[0] + "': " + std::strerror(err);
    if (step == detail::kStepExec) return not_found(what);
    return failed_precondition(what);
  }
  size_t report_at = std::string::npos;
  if (!status_bytes.empty() && status_bytes[0] == detail::kSetupTag) {
    switch (status_bytes[1]) {
      case detail::kIsolationNetns: result.network_isolation = "netns"; break;
      case detail::kIsolationSeccomp:
        result.network_isolation = "seccomp";
        if (!options.force_seccomp_network) log_seccomp_fallback_once();
        break;
      default: result.network_isolation = "none"; break;
    }
    result.filesystem_isolation = status_bytes[2] == detail::kReadonlyRoot ? "readonly_root" : "none";
    if (status_bytes[3] == detail::kUserNamespace) {
      result.user_isolation = plan.confine.user_namespace ? "userns" : "uid";
      result.child_uid = plan.confine.uid;
    }
    report_at = detail::kSetupBytes;
  } else {
    result.network_isolation = "none";
    result.filesystem_isolation = "none";
    report_at = 0;
  }
  auto report_complete = [&]() { return status_bytes.size() >= report_at + detail::kReportBytes; };

  StreamCapture out_capture(options.max_output_bytes), err_capture(options.max_output_bytes);
  bool out_open = true, err_open = true, leader_done = false, supervisor_gone = false;
  const double backstop = start + options.timeout_s + kSupervisorGraceS;
  double drain_deadline = backstop;

  while (out_open || err_open || !leader_done) {
    double now = monotonic_s();
    if (!leader_done && (report_complete() || !status_open)) {
      leader_done = true;
      drain_deadline = now + kDrainAfterExitS;
    }
    if (!leader_done && now >= backstop) {
      // The supervisor overran its own deadline: take it down (and, inside its namespace, everything).
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      supervisor_gone = true;
      leader_done = true;
      drain_deadline = now + kDrainAfterExitS;
    }
    if (leader_done && now >= drain_deadline) break;
    if (leader_done && !out_open && !err_open) break;

    pollfd fds[3];
    nfds_t nfds = 0;
    if (out_open) fds[nfds++] = {out_pipe.read.get(), POLLIN, 0};
    if (err_open) fds[nfds++] = {err_pipe.read.get(), POLLIN, 0};
    if (!leader_done && status_open) fds[nfds++] = {status_pipe.read.get(), POLLIN, 0};
    double limit = leader_done ? drain_deadline : backstop;
    int wait_ms = static_cast<int>(std::ceil(std::max(0.0, limit - now) * 1000));
    if (leader_done) wait_ms = std::min(wait_ms, kMaxPollWaitMs);
    int ready = poll(fds, nfds, wait_ms);
    if (ready < 0 && errno != EINTR) break;
    for (nfds_t i = 0; i < nfds && ready > 0; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == out_pipe.read.get()) out_open = drain_once(fds[i].fd, out_capture);
      if (fds[i].fd == err_pipe.read.get()) err_open = drain_once(fds[i].fd, err_capture);
      if (fds[i].fd == status_pipe.read.get()) read_status();
    }
  }

  // The supervisor exits right after its report; inside a PID namespace its exit waits for the kernel to
  // kill the namespace's remaining processes.
  int supervisor_status = 0;
  while (waitpid(pid, &supervisor_status, 0) < 0 && errno == EINTR) {
  }
  if (report_complete() && status_bytes[report_at] == detail::kFailureTag) {
    // The child's setup went through but its exec did not (a program its ids may not run).
    int err = 0;
    std::memcpy(&err, status_bytes.data() + report_at + 2, sizeof(int));
    return not_found(std::string(plan.confine.on ? "sandbox: confinement: " : "sandbox: ") +
                     detail::step_name(static_cast<uint8_t>(status_bytes[report_at + 1])) + " failed for '" +
                     options.argv[0] + "': " + std::strerror(err));
  }
  if (report_complete()) {
    int wstatus = 0;
    std::memcpy(&wstatus, status_bytes.data() + report_at + 1, sizeof(int));
    result.timed_out = status_bytes[report_at + 1 + sizeof(int)] != 0;
    if (WIFEXITED(wstatus)) {
      result.exit_code = WEXITSTATUS(wstatus);
    } else if (WIFSIGNALED(wstatus)) {
      result.term_signal = WTERMSIG(wstatus);
    }
  } else {
    // No report: the supervisor itself died or was killed by the backstop.
    result.timed_out = supervisor_gone;
    result.term_signal = WIFSIGNALED(supervisor_status) ? WTERMSIG(supervisor_status) : SIGKILL;
  }
  result.wall_s = monotonic_s() - start;
  result.stdout_text = out_capture.finish();
  result.stderr_text = err_capture.finish();
  return result;
}

}  // namespace kiln::sandbox
