#include "kiln/sandbox/sandbox.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstddef>
#include <cstring>
#include <sstream>

#include "kiln/core/time.h"
#include "kiln/log/log.h"
#include "unique_fd.h"

namespace kiln::sandbox {
namespace {

using detail::Pipe;
using detail::UniqueFd;

#if defined(__x86_64__)
constexpr uint32_t kNativeAuditArch = AUDIT_ARCH_X86_64;
constexpr uint32_t kForeignSyscallBit = 0x40000000u;  // x32 ABI syscalls share the x86_64 arch value
#elif defined(__aarch64__)
constexpr uint32_t kNativeAuditArch = AUDIT_ARCH_AARCH64;
constexpr uint32_t kForeignSyscallBit = 0;
#else
#error "kiln::sandbox: no seccomp arch value for this CPU"
#endif

// After the leader is gone, how long stray holders of the output pipes may keep them open before the
// parent stops reading. Only a process that left the group (setsid) can still hold them.
constexpr double kDrainAfterExitS = 1.0;
// Upper bound of one poll() wait, so a missed wakeup costs at most this much latency.
constexpr int kMaxPollWaitMs = 50;

// Steps of the child's setup, reported to the parent when one fails.
enum ChildStep : uint8_t {
  kStepSetpgid = 1,
  kStepSignals,
  kStepStdio,
  kStepRlimit,
  kStepAffinity,
  kStepChdir,
  kStepNoNewPrivs,
  kStepSeccomp,
  kStepExec,
};

const char* step_name(uint8_t step) {
  switch (step) {
    case kStepSetpgid: return "setpgid";
    case kStepSignals: return "signal reset";
    case kStepStdio: return "redirecting stdio";
    case kStepRlimit: return "setrlimit";
    case kStepAffinity: return "sched_setaffinity";
    case kStepChdir: return "chdir";
    case kStepNoNewPrivs: return "PR_SET_NO_NEW_PRIVS";
    case kStepSeccomp: return "installing the seccomp network filter";
    case kStepExec: return "exec";
    default: return "setup";
  }
}

// The first byte the child writes on its status pipe says how the network was isolated.
constexpr char kIsolationNetns = 'n';
constexpr char kIsolationSeccomp = 's';
constexpr char kIsolationNone = '0';
constexpr char kFailureTag = 'E';

// Refuses socket() for the internet and raw packet families with EPERM; everything else is allowed.
// Unix sockets stay usable (runtimes use them internally); a syscall of a foreign ABI is refused outright.
std::vector<sock_filter> network_filter() {
  const uint32_t deny = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
  std::vector<sock_filter> f = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kNativeAuditArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
  };
  if (kForeignSyscallBit != 0) {
    f.push_back(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, kForeignSyscallBit, 0, 1));
    f.push_back(BPF_STMT(BPF_RET | BPF_K, deny));
  }
  // Little-endian: the low 32 bits of args[0] sit at its offset.
  std::vector<sock_filter> tail = {
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 0, 6),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET, 3, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET6, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_PACKET, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, deny),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  f.insert(f.end(), tail.begin(), tail.end());
  return f;
}

// Everything the child needs, prepared before fork: after fork only async-signal-safe calls are made.
struct ChildPlan {
  std::string exe;
  std::vector<char*> argv;
  std::vector<char*> envp;
  const char* working_dir = nullptr;
  std::vector<std::pair<int, rlim_t>> rlimits;
  bool set_affinity = false;
  cpu_set_t affinity;
  bool isolate_network = false;
  bool force_seccomp = false;
  sock_fprog filter_prog{};
  pid_t parent_pid = 0;
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1, status_fd = -1;
};

void write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

[[noreturn]] void child_fail(int status_fd, uint8_t step) {
  int err = errno;
  char msg[1 + 1 + sizeof(int)];
  msg[0] = kFailureTag;
  msg[1] = static_cast<char>(step);
  std::memcpy(msg + 2, &err, sizeof(int));
  write_all(status_fd, msg, sizeof msg);
  _exit(127);
}

void close_fds_except(int keep) {
  // close_range where the kernel has it (5.9+), a bounded loop where it does not.
  bool closed = keep > 3 ? syscall(SYS_close_range, 3u, static_cast<unsigned>(keep - 1), 0u) == 0 : true;
  closed = closed && syscall(SYS_close_range, static_cast<unsigned>(keep + 1), ~0u, 0u) == 0;
  if (closed) return;
  rlimit lim{};
  int max_fd = (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
                   ? static_cast<int>(std::min<rlim_t>(lim.rlim_cur, 1 << 20))
                   : 65536;
  for (int fd = 3; fd < max_fd; ++fd) {
    if (fd != keep) ::close(fd);
  }
}

[[noreturn]] void run_child(const ChildPlan& plan) {
  const int st = plan.status_fd;
  if (setpgid(0, 0) != 0) child_fail(st, kStepSetpgid);
  // The sandboxed group must not outlive the thread that runs it.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != plan.parent_pid) _exit(127);

  // Dispositions set to SIG_IGN and the blocked mask survive exec: give the child a clean slate.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    sigaction(sig, &dfl, nullptr);  // fails harmlessly for the reserved real-time signals
  }
  sigset_t none;
  sigemptyset(&none);
  if (sigprocmask(SIG_SETMASK, &none, nullptr) != 0) child_fail(st, kStepSignals);

  if (dup2(plan.stdin_fd, 0) < 0 || dup2(plan.stdout_fd, 1) < 0 || dup2(plan.stderr_fd, 2) < 0) {
    child_fail(st, kStepStdio);
  }
  for (const auto& [resource, value] : plan.rlimits) {
    rlimit lim{value, value};
    if (setrlimit(resource, &lim) != 0) child_fail(st, kStepRlimit);
  }
  if (plan.set_affinity && sched_setaffinity(0, sizeof plan.affinity, &plan.affinity) != 0) {
    child_fail(st, kStepAffinity);
  }
  if (plan.working_dir && chdir(plan.working_dir) != 0) child_fail(st, kStepChdir);

  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) child_fail(st, kStepNoNewPrivs);
  char isolation = kIsolationNone;
  if (plan.isolate_network) {
    if (!plan.force_seccomp && unshare(CLONE_NEWNET) == 0) {
      isolation = kIsolationNetns;
    } else {
      if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &plan.filter_prog) != 0) {
        child_fail(st, kStepSeccomp);
      }
      isolation = kIsolationSeccomp;
    }
  }
  write_all(st, &isolation, 1);

  close_fds_except(st);
  execve(plan.exe.c_str(), plan.argv.data(), plan.envp.data());
  child_fail(st, kStepExec);
}

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

// Whether the leader has exited, without reaping it: its pid stays reserved as the group id until the
// group has been killed.
bool leader_exited(pid_t pid) {
  siginfo_t info{};
  if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) return true;
  return info.si_pid == pid;
}

void log_seccomp_fallback_once() {
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true)) {
    spdlog::warn("sandbox: network namespaces are not permitted here; children get a seccomp filter "
                 "refusing AF_INET/AF_INET6/AF_PACKET sockets instead");
  }
}

}  // namespace

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
  KILN_ASSIGN_OR_RETURN(std::string exe, resolve_executable(options.argv[0], options.env));

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
  std::vector<sock_filter> filter = network_filter();
  plan.isolate_network = options.isolate_network;
  plan.force_seccomp = options.force_seccomp_network;
  plan.filter_prog.len = static_cast<unsigned short>(filter.size());
  plan.filter_prog.filter = filter.data();

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
  pid_t pid = fork();
  if (pid < 0) return unavailable(std::string("sandbox: fork: ") + std::strerror(errno));
  if (pid == 0) run_child(plan);

  // Set the group from this side too, so the kill below cannot race the child's own setpgid.
  setpgid(pid, pid);
  out_pipe.write.reset();
  err_pipe.write.reset();
  status_pipe.write.reset();
  dev_null.reset();

  SandboxResult result;
  // The status pipe closes at exec (close-on-exec) or carries the reason the setup failed.
  std::string status_bytes;
  for (;;) {
    char buf[64];
    ssize_t n = ::read(status_pipe.read.get(), buf, sizeof buf);
    if (n > 0) {
      status_bytes.append(buf, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  size_t failure_at = status_bytes.find(kFailureTag);
  if (failure_at != std::string::npos && status_bytes.size() >= failure_at + 2 + sizeof(int)) {
    int err = 0;
    std::memcpy(&err, status_bytes.data() + failure_at + 2, sizeof(int));
    auto step = static_cast<uint8_t>(status_bytes[failure_at + 1]);
    kill(-pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    std::string what = std::string("sandbox: ") + step_name(step) + " failed for '" + options.argv[0] +
                       "': " + std::strerror(err);
    if (step == kStepExec) return not_found(what);
    return failed_precondition(what);
  }
  switch (status_bytes.empty() ? kIsolationNone : status_bytes[0]) {
    case kIsolationNetns: result.network_isolation = "netns"; break;
    case kIsolationSeccomp:
      result.network_isolation = "seccomp";
      if (!options.force_seccomp_network) log_seccomp_fallback_once();
      break;
    default: result.network_isolation = "none"; break;
  }

  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  StreamCapture out_capture(options.max_output_bytes), err_capture(options.max_output_bytes);
  bool out_open = true, err_open = true, leader_done = false;
  const double deadline = start + options.timeout_s;
  double drain_deadline = deadline;

  while (out_open || err_open || !leader_done) {
    double now = monotonic_s();
    if (!leader_done && now >= deadline) {
      kill(-pid, SIGKILL);
      result.timed_out = true;
      leader_done = true;
      drain_deadline = now + kDrainAfterExitS;
    }
    if (!leader_done && leader_exited(pid)) {
      // Whatever the leader left behind (a background fork, a daemon thread's process) dies with it.
      kill(-pid, SIGKILL);
      leader_done = true;
      drain_deadline = std::min(deadline, now + kDrainAfterExitS);
    }
    if (leader_done && now >= drain_deadline) break;
    if (leader_done && !out_open && !err_open) break;

    pollfd fds[3];
    nfds_t nfds = 0;
    if (out_open) fds[nfds++] = {out_pipe.read.get(), POLLIN, 0};
    if (err_open) fds[nfds++] = {err_pipe.read.get(), POLLIN, 0};
    if (!leader_done && pidfd.valid()) fds[nfds++] = {pidfd.get(), POLLIN, 0};
    double limit = leader_done ? drain_deadline : deadline;
    int wait_ms = static_cast<int>(std::ceil(std::max(0.0, limit - now) * 1000));
    if (!pidfd.valid() || leader_done) wait_ms = std::min(wait_ms, kMaxPollWaitMs);
    int ready = poll(fds, nfds, wait_ms);
    if (ready < 0 && errno != EINTR) break;
    for (nfds_t i = 0; i < nfds && ready > 0; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == out_pipe.read.get()) out_open = drain_once(fds[i].fd, out_capture);
      if (fds[i].fd == err_pipe.read.get()) err_open = drain_once(fds[i].fd, err_capture);
    }
  }

  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(wstatus)) {
    result.exit_code = WEXITSTATUS(wstatus);
  } else if (WIFSIGNALED(wstatus)) {
    result.term_signal = WTERMSIG(wstatus);
  }
  result.wall_s = monotonic_s() - start;
  result.stdout_text = out_capture.finish();
  result.stderr_text = err_capture.finish();
  return result;
}

}  // namespace kiln::sandbox
