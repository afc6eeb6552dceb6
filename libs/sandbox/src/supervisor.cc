#include "supervisor.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <grp.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

namespace kiln::sandbox::detail {

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
    case kStepFork: return "fork (supervisor)";
    case kStepMount: return "setting up the mount namespace";
    case kStepCapabilities: return "dropping capabilities";
    case kStepGuard: return "installing the seccomp guard filter";
    case kStepProc: return "mounting a fresh /proc";
    case kStepBind: return "mounting a bound path";
    case kStepHide: return "covering a hidden path";
    case kStepTmpfs: return "mounting the private /tmp";
    case kStepIdentity: return "taking the sandbox's user and group ids";
    case kStepNetns: return "creating a network namespace";
    case kStepUserns: return "mapping the user namespace's ids";
    default: return "setup";
  }
}

namespace {

// Subreaper fallback: rounds of "kill every child we inherited, reap" before giving up on stragglers.
constexpr int kMaxKillRounds = 2000;
// Highest capability number we try to drop from the bounding set (the kernel refuses the rest).
constexpr int kMaxCapability = 63;
// mount_setattr(2) (Linux 5.12); declared here because <linux/mount.h> clashes with <sys/mount.h>.
constexpr uint64_t kMountAttrRdonly = 0x00000001;
struct MountAttr {
  uint64_t attr_set;
  uint64_t attr_clr;
  uint64_t propagation;
  uint64_t userns_fd;
};
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif

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

bool write_file_raw(const char* path, const char* text) {
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const size_t n = std::strlen(text);
  const bool ok = ::write(fd, text, n) == static_cast<ssize_t>(n);
  ::close(fd);
  return ok;
}

[[noreturn]] void child_fail(int status_fd, uint8_t step) {
  int err = errno;
  char msg[kFailureBytes];
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

// fork(2) as a bare system call: glibc's fork() runs atfork handlers that may take locks another thread
// of the caller held when the supervisor was cloned.
pid_t raw_fork() { return static_cast<pid_t>(syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, nullptr)); }

void reset_signals() {
  // The caller's handlers and SIG_IGN dispositions survive fork, and SIG_IGN survives exec: the
  // supervisor, and the child after it, start from the defaults.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    sigaction(sig, &dfl, nullptr);  // fails harmlessly for the reserved real-time signals
  }
}

// A new mount namespace: a fresh /proc when in a new PID namespace (so the caller's processes, and their
// /proc/<pid>/environ, are out of sight), and with `readonly_root` every mount read-only except the
// working directory. Returns whether the root was made read-only.
bool isolate_filesystem(const ChildPlan& plan, int st) {
  if (!plan.in_pid_namespace && !plan.readonly_root) return false;
  if (unshare(CLONE_NEWNS) != 0) return false;  // not permitted here: documented, not fatal
  // Private first, so nothing below propagates back into the caller's namespace.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) child_fail(st, kStepMount);
  if (plan.in_pid_namespace) {
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);  // best effort
  }
  if (!plan.readonly_root) return false;
  MountAttr ro{kMountAttrRdonly, 0, 0, 0};
  if (syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &ro, sizeof ro) != 0) return false;
  if (plan.working_dir) {
    MountAttr rw{0, kMountAttrRdonly, 0, 0};
    if (mount(plan.working_dir, plan.working_dir, nullptr, MS_BIND | MS_REC, nullptr) != 0 ||
        syscall(SYS_mount_setattr, AT_FDCWD, plan.working_dir, AT_RECURSIVE, &rw, sizeof rw) != 0) {
      child_fail(st, kStepMount);
    }
  }
  // A private, small, writable /dev/shm: runtimes (the CUDA driver, OpenMP, glibc's sem_open) need one,
  // and the host's is out of reach (nothing written there is seen outside, nothing outside is seen).
  // Best effort: where /dev/shm does not exist the child simply has none.
  mount("kiln-shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=64m,mode=1777");
  return true;
}

// mkdir -p for a path in a fixed buffer (no allocation after fork). Existing components are fine.
bool make_dirs_raw(const char* path) {
  char buf[4096];
  size_t n = std::strlen(path);
  if (n == 0 || n >= sizeof buf) return false;
  std::memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; ++i) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    const char saved = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return false;
    buf[i] = saved;
  }
  return true;
}

// "/proc/self/fd/<fd>": how a mount reaches a path opened before the root turned read-only.
void fd_path(int fd, char (&out)[32]) {
  char digits[12];
  size_t n = 0;
  for (unsigned v = static_cast<unsigned>(fd); n == 0 || v > 0; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  const char prefix[] = "/proc/self/fd/";
  std::memcpy(out, prefix, sizeof prefix - 1);
  size_t at = sizeof prefix - 1;
  while (n > 0) out[at++] = digits[--n];
  out[at] = '\0';
}

bool exists(const char* path) {
  struct stat st {};
  return ::stat(path, &st) == 0;
}

bool set_readonly(const char* path, unsigned flags) {
  MountAttr ro{kMountAttrRdonly, 0, 0, 0};
  return syscall(SYS_mount_setattr, AT_FDCWD, path, flags, &ro, sizeof ro) == 0;
}

// The sandbox's ids, inside and outside alike; supplementary groups dropped where they can be.
void take_identity(const ConfinePlan& c, int st) {
  if (!c.user_namespace && setgroups(0, nullptr) != 0) child_fail(st, kStepIdentity);
  if (setresgid(c.gid, c.gid, c.gid) != 0) child_fail(st, kStepIdentity);
  if (setresuid(c.uid, c.uid, c.uid) != 0) child_fail(st, kStepIdentity);
}

// The confined child's file system (SandboxOptions::confine): every step must hold, or the run fails.
// Runs inside the user namespace, where this process holds every capability.
void confine_filesystem(ConfinePlan& c, int st) {
  if (unshare(CLONE_NEWNS) != 0) child_fail(st, kStepMount);
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) child_fail(st, kStepMount);
  // Reached before anything is covered, so a bind may come from under a hidden path.
  for (auto& b : c.binds) {
    b.fd = ::open(b.outside.c_str(), O_PATH | O_CLOEXEC);
    if (b.fd < 0) child_fail(st, kStepBind);
  }
  // The PID namespace's own /proc: nothing outside it in sight, no /proc/<tester>/environ.
  if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) child_fail(st, kStepProc);
  if (!set_readonly("/", AT_RECURSIVE)) child_fail(st, kStepMount);
  // /proc keeps proc's own rules rather than a read-only mount's: the CUDA runtime names its threads
  // through /proc/self/task/<tid>/comm and fails to initialize (cudaErrorOperatingSystem) when it cannot.
  MountAttr proc_rw{0, kMountAttrRdonly, 0, 0};
  if (syscall(SYS_mount_setattr, AT_FDCWD, "/proc", 0, &proc_rw, sizeof proc_rw) != 0) child_fail(st, kStepProc);
  const bool have_tmp = exists("/tmp");
  if (have_tmp && mount("kiln-tmp", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, c.tmp_options.c_str()) != 0)
    child_fail(st, kStepTmpfs);
  // A private, small, writable /dev/shm: runtimes (the CUDA driver, OpenMP, glibc's sem_open) want one.
  if (exists("/dev/shm") &&
      mount("kiln-shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=64m,mode=1777") != 0)
    child_fail(st, kStepTmpfs);
  // Covers: an empty tmpfs over a directory (read-only once the binds below it are made), an empty file
  // over a file.
  const char* empty_file = "/dev/null";
  if (have_tmp) {
    int fd = ::open("/tmp/.kiln-hidden", O_CREAT | O_WRONLY | O_CLOEXEC, 0444);
    if (fd < 0) child_fail(st, kStepHide);
    ::close(fd);
    empty_file = "/tmp/.kiln-hidden";
  }
  for (const auto& h : c.hidden) {
    const bool ok =
        h.is_dir ? mount("kiln-hidden", h.path.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                         "size=64k,nr_inodes=64,mode=0755") == 0
                 : mount(empty_file, h.path.c_str(), nullptr, MS_BIND, nullptr) == 0 && set_readonly(h.path.c_str(), 0);
    if (!ok) child_fail(st, kStepHide);
  }
  for (auto& b : c.binds) {
    if (b.is_dir) {
      if (!make_dirs_raw(b.inside.c_str())) child_fail(st, kStepBind);
    } else if (!exists(b.inside.c_str())) {
      int fd = ::open(b.inside.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0444);
      if (fd < 0) child_fail(st, kStepBind);
      ::close(fd);
    }
    char from[32];
    fd_path(b.fd, from);
    if (mount(from, b.inside.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) child_fail(st, kStepBind);
    MountAttr attr{b.writable ? 0 : kMountAttrRdonly, b.writable ? kMountAttrRdonly : 0, 0, 0};
    if (syscall(SYS_mount_setattr, AT_FDCWD, b.inside.c_str(), AT_RECURSIVE, &attr, sizeof attr) != 0)
      child_fail(st, kStepBind);
    ::close(b.fd);
    b.fd = -1;
  }
  for (const auto& h : c.hidden) {
    if (h.is_dir && !set_readonly(h.path.c_str(), 0)) child_fail(st, kStepHide);
  }
}

void drop_bounding_capabilities() {
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  // Without CAP_SETPCAP this fails, and then there is nothing to drop from the bounding set that exec
  // could grant under PR_SET_NO_NEW_PRIVS anyway.
  for (int cap = 0; cap <= kMaxCapability; ++cap) prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
}

void drop_all_capabilities(int st) {
  drop_bounding_capabilities();
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capset, &header, data) != 0) child_fail(st, kStepCapabilities);
}

[[noreturn]] void run_child(ChildPlan& plan) {
  const int st = plan.status_fd;
  if (setpgid(0, 0) != 0) child_fail(st, kStepSetpgid);
  // The sandboxed group must not outlive its supervisor.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != plan.supervisor_pid) _exit(127);

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
  bool readonly = false;
  if (plan.confine.on) {
    confine_filesystem(plan.confine, st);
    readonly = true;
  } else {
    readonly = isolate_filesystem(plan, st);
  }
  // After the mounts, so the working directory is the writable bind mount.
  if (plan.working_dir && chdir(plan.working_dir) != 0) child_fail(st, kStepChdir);

  char isolation = kIsolationNone;
  bool use_seccomp_network = false;
  if (plan.confine.on) {
    if (unshare(CLONE_NEWNET) != 0) child_fail(st, kStepNetns);
    isolation = kIsolationNetns;
  } else if (plan.isolate_network) {
    if (!plan.force_seccomp && unshare(CLONE_NEWNET) == 0) {
      isolation = kIsolationNetns;
    } else {
      use_seccomp_network = true;
      isolation = kIsolationSeccomp;
    }
  }
  if (plan.confine.on) {
    // The sandbox's ids, after the bounding set (dropping it needs CAP_SETPCAP) and before the rest
    // (taking them needs CAP_SETUID; as root, taking them clears every capability anyway).
    drop_bounding_capabilities();
    take_identity(plan.confine, st);
  }
  if (plan.drop_capabilities) drop_all_capabilities(st);

  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) child_fail(st, kStepNoNewPrivs);
  if (use_seccomp_network && syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &plan.filter_prog) != 0) {
    child_fail(st, kStepSeccomp);
  }
  const pid_t supervisor = getppid();
  auto patch = [&](const std::vector<size_t>& slots, pid_t value) {
    for (size_t i : slots) plan.guard.code[i].k = static_cast<uint32_t>(value);
  };
  patch(plan.guard.supervisor_slots, supervisor);
  patch(plan.guard.neg_supervisor_slots, -supervisor);
  if (plan.in_pid_namespace) {
    patch(plan.guard.caller_slots, supervisor);
    patch(plan.guard.neg_caller_slots, -supervisor);
  }
  sock_fprog guard{static_cast<unsigned short>(plan.guard.code.size()), plan.guard.code.data()};
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &guard) != 0) child_fail(st, kStepGuard);

  const char setup[kSetupBytes] = {kSetupTag, isolation, readonly ? kReadonlyRoot : '-',
                                   plan.confine.on ? kUserNamespace : '-'};
  write_all(st, setup, sizeof setup);

  close_fds_except(st);
  execve(plan.exe.c_str(), plan.argv.data(), plan.envp.data());
  child_fail(st, kStepExec);
}

double monotonic_now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void sleep_ms(int ms) {
  timespec ts{0, static_cast<long>(ms) * 1000000L};
  nanosleep(&ts, nullptr);
}

// Subreaper fallback: every process the child left behind was reparented to us. Kill each child we have
// (and its process group, which catches a setsid() group at once), reap, repeat until none is left.
void kill_inherited_descendants() {
  // "/proc/self/task/<pid>/children", built without stdio (not async-signal-safe).
  char path[64] = "/proc/self/task/";
  size_t len_prefix = std::strlen(path);
  char digits[16];
  size_t n_digits = 0;
  for (long v = getpid(); v > 0 && n_digits < sizeof digits; v /= 10) {
    digits[n_digits++] = static_cast<char>('0' + v % 10);
  }
  while (n_digits > 0) path[len_prefix++] = digits[--n_digits];
  std::memcpy(path + len_prefix, "/children", sizeof "/children");
  for (int round = 0; round < kMaxKillRounds; ++round) {
    bool listed = false;
    // One read of up to 64 KiB (thousands of pids); whatever does not fit is found in the next round.
    char buf[65536];
    size_t len = 0;
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ssize_t n;
      while (len < sizeof buf && (n = ::read(fd, buf + len, sizeof buf - len)) > 0) {
        len += static_cast<size_t>(n);
      }
      ::close(fd);
    }
    auto is_digit = [&](size_t i) { return buf[i] >= '0' && buf[i] <= '9'; };
    size_t end = len;
    if (len == sizeof buf) {
      while (end > 0 && is_digit(end - 1)) --end;  // a number cut by the buffer is not a pid: never signal it
    }
    long pid = -1;
    for (size_t i = 0; i <= end; ++i) {
      if (i < end && is_digit(i)) {
        pid = (pid < 0 ? 0 : pid * 10) + (buf[i] - '0');
        continue;
      }
      if (pid > 0) {
        kill(static_cast<pid_t>(-pid), SIGKILL);
        kill(static_cast<pid_t>(pid), SIGKILL);
        listed = true;
      }
      pid = -1;
    }
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    if (!listed) {
      errno = 0;
      if (waitpid(-1, nullptr, WNOHANG) < 0 && errno == ECHILD) return;
      sleep_ms(1);
    }
  }
}

}  // namespace

// The supervisor: starts the child, enforces the timeout, reports the child's status and makes sure that
// nothing the child started survives. Inside a new PID namespace it is the namespace's init, and the
// kernel kills every remaining process of the namespace when it exits.
[[noreturn]] void run_supervisor(ChildPlan& plan) {
  const int st = plan.status_fd;
  if (plan.confine.user_namespace) {
    // Our own id maps, as their owner: /proc/self's files are ours only while we are dumpable (the caller
    // may not be, after a change of ids); we stop being so below.
    prctl(PR_SET_DUMPABLE, 1);
    if (!write_file_raw("/proc/self/setgroups", "deny") ||
        !write_file_raw("/proc/self/uid_map", plan.confine.uid_map.c_str()) ||
        !write_file_raw("/proc/self/gid_map", plan.confine.gid_map.c_str()))
      child_fail(st, kStepUserns);
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (!plan.in_pid_namespace && getppid() != plan.parent_pid) _exit(127);
  // Not dumpable: a child without CAP_SYS_PTRACE cannot read our memory or /proc/<pid>/environ, which
  // still holds the caller's environment.
  prctl(PR_SET_DUMPABLE, 0);
  if (!plan.in_pid_namespace) prctl(PR_SET_CHILD_SUBREAPER, 1);
  reset_signals();
  const double deadline = monotonic_now_s() + plan.timeout_s;

  plan.supervisor_pid = getpid();
  pid_t child = raw_fork();
  if (child < 0) child_fail(st, kStepFork);
  if (child == 0) run_child(plan);
  setpgid(child, child);
  close_fds_except(st);

  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, child, 0));
  int wstatus = 0;
  char timed_out = 0;
  for (;;) {
    pid_t r = waitpid(child, &wstatus, WNOHANG);
    if (r == child) break;
    if (r < 0 && errno != EINTR) break;
    const double left = deadline - monotonic_now_s();
    if (left <= 0) {
      kill(-child, SIGKILL);
      kill(child, SIGKILL);
      timed_out = 1;
      while (waitpid(child, &wstatus, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    const int wait_ms = static_cast<int>(std::min(left * 1000 + 1, 1000.0));
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      poll(&p, 1, wait_ms);
    } else {
      sleep_ms(std::min(wait_ms, 5));
    }
  }
  // Whatever the leader left behind in its group (a background job, a daemon) dies with it.
  kill(-child, SIGKILL);
  if (!plan.in_pid_namespace) kill_inherited_descendants();

  char report[kReportBytes];
  report[0] = kReportTag;
  std::memcpy(report + 1, &wstatus, sizeof(int));
  report[1 + sizeof(int)] = timed_out;
  write_all(st, report, sizeof report);
  _exit(0);
}

}  // namespace kiln::sandbox::detail
