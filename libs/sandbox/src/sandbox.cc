#include "kiln/sandbox/sandbox.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
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
// The supervisor enforces the timeout itself; the caller kills it only if it overruns by this much.
constexpr double kSupervisorGraceS = 5.0;
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
  kStepFork,
  kStepMount,
  kStepCapabilities,
  kStepGuard,
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
    case kStepFork: return "fork (supervisor)";
    case kStepMount: return "setting up the mount namespace";
    case kStepCapabilities: return "dropping capabilities";
    case kStepGuard: return "installing the seccomp guard filter";
    default: return "setup";
  }
}

// The status pipe carries, in order: the child's setup message (kSetupTag, how the network was isolated,
// whether the root is read-only) or a failure (kFailureTag, step, errno); then the supervisor's report
// (kReportTag, the child's wait status, whether it timed out).
constexpr char kIsolationNetns = 'n';
constexpr char kIsolationSeccomp = 's';
constexpr char kIsolationNone = '0';
constexpr char kReadonlyRoot = 'r';
constexpr char kSetupTag = 'N';
constexpr char kFailureTag = 'E';
constexpr char kReportTag = 'R';
constexpr size_t kSetupBytes = 3;
constexpr size_t kFailureBytes = 2 + sizeof(int);
constexpr size_t kReportBytes = 1 + sizeof(int) + 1;

constexpr uint32_t kDenyEperm = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
constexpr uint32_t kDenyEnosys = SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA);

void add_bpf_prologue(std::vector<sock_filter>& f) {
  f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)));
  f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kNativeAuditArch, 1, 0));
  f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
  f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
  if (kForeignSyscallBit != 0) {
    f.push_back(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, kForeignSyscallBit, 0, 1));
    f.push_back(BPF_STMT(BPF_RET | BPF_K, kDenyEperm));
  }
}

// Refuses syscall `nr` with `ret` when the low 32 bits of its first argument equal one of `values`
// (little-endian: they sit at the argument's offset). Returns where each comparison is, so a value known
// only after fork can be patched in.
std::vector<size_t> add_deny_if_arg0(std::vector<sock_filter>& f, uint32_t nr, const std::vector<uint32_t>& values,
                                     uint32_t ret) {
  const size_t m = values.size();
  f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
  f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, static_cast<uint8_t>(m + 3)));
  f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])));
  std::vector<size_t> at;
  for (size_t j = 0; j < m; ++j) {
    at.push_back(f.size());
    f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, values[j], static_cast<uint8_t>(m - j), 0));
  }
  f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  f.push_back(BPF_STMT(BPF_RET | BPF_K, ret));
  return at;
}

void add_deny(std::vector<sock_filter>& f, uint32_t nr, uint32_t ret) {
  f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
  f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 1));
  f.push_back(BPF_STMT(BPF_RET | BPF_K, ret));
}

// fork/vfork/clone without CLONE_THREAD fail with EPERM and clone3 with ENOSYS (glibc then falls back to
// clone, so threads still start).
void add_process_creation_denial(std::vector<sock_filter>& f) {
#ifdef __NR_fork
  add_deny(f, __NR_fork, kDenyEperm);
#endif
#ifdef __NR_vfork
  add_deny(f, __NR_vfork, kDenyEperm);
#endif
  add_deny(f, __NR_clone3, kDenyEnosys);
  // clone: allowed only for a thread (flags are its first argument on every supported ABI).
  f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
  f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 4));
  f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])));
  f.push_back(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 0, 1));
  f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  f.push_back(BPF_STMT(BPF_RET | BPF_K, kDenyEperm));
}

// The guard every child gets: it may not signal the caller, the caller's group, its supervisor or every
// process at once (kill(-1)), and may not trace or read the memory of other processes. With
// `deny_process_creation`, fork/vfork/clone without CLONE_THREAD fail with EPERM and clone3 with ENOSYS
// (glibc then falls back to clone, so threads still start).
struct GuardFilter {
  std::vector<sock_filter> code;
  std::vector<size_t> supervisor_slots;      // patched with the supervisor's pid in the child
  std::vector<size_t> neg_supervisor_slots;  // ... and its negation (its process group)
  // The caller's pid and group. Inside a PID namespace those numbers name unrelated processes of the
  // namespace (the caller is not addressable at all), so the child overwrites them there.
  std::vector<size_t> caller_slots;
  std::vector<size_t> neg_caller_slots;
};

GuardFilter guard_filter(pid_t caller_pid, pid_t caller_pgid, bool deny_process_creation) {
  constexpr uint32_t kPlaceholder = 0;  // pid 0 never names another process: kill(0) is the own group
  GuardFilter g;
  add_bpf_prologue(g.code);
  const std::vector<uint32_t> targets = {static_cast<uint32_t>(-1), static_cast<uint32_t>(caller_pid),
                                         static_cast<uint32_t>(-caller_pgid), kPlaceholder, kPlaceholder};
  for (uint32_t nr : {static_cast<uint32_t>(__NR_kill), static_cast<uint32_t>(__NR_tkill),
                      static_cast<uint32_t>(__NR_tgkill)}) {
    std::vector<size_t> at = add_deny_if_arg0(g.code, nr, targets, kDenyEperm);
    g.caller_slots.push_back(at[1]);
    g.neg_caller_slots.push_back(at[2]);
    g.supervisor_slots.push_back(at[3]);
    g.neg_supervisor_slots.push_back(at[4]);
  }
  for (uint32_t nr : {static_cast<uint32_t>(__NR_ptrace), static_cast<uint32_t>(__NR_process_vm_readv),
                      static_cast<uint32_t>(__NR_process_vm_writev), static_cast<uint32_t>(__NR_pidfd_open)}) {
    add_deny(g.code, nr, kDenyEperm);
  }
  if (deny_process_creation) add_process_creation_denial(g.code);
  g.code.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  return g;
}

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

// Everything the supervisor and the child need, prepared before fork: after fork only async-signal-safe
// calls (raw system calls) are made, since the caller may have other threads holding locks.
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
  bool in_pid_namespace = false;
  bool readonly_root = false;
  bool drop_capabilities = false;
  sock_fprog filter_prog{};
  GuardFilter guard;
  double timeout_s = 0;
  pid_t parent_pid = 0;
  pid_t supervisor_pid = 0;  // as the child sees it (1 inside a PID namespace)
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

void drop_all_capabilities(int st) {
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  // Without CAP_SETPCAP this fails, and then there is nothing to drop from the bounding set that exec
  // could grant under PR_SET_NO_NEW_PRIVS anyway.
  for (int cap = 0; cap <= kMaxCapability; ++cap) prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
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
  const bool readonly = isolate_filesystem(plan, st);
  // After the mounts, so the working directory is the writable bind mount.
  if (plan.working_dir && chdir(plan.working_dir) != 0) child_fail(st, kStepChdir);

  char isolation = kIsolationNone;
  bool use_seccomp_network = false;
  if (plan.isolate_network) {
    if (!plan.force_seccomp && unshare(CLONE_NEWNET) == 0) {
      isolation = kIsolationNetns;
    } else {
      use_seccomp_network = true;
      isolation = kIsolationSeccomp;
    }
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

  const char setup[kSetupBytes] = {kSetupTag, isolation, readonly ? kReadonlyRoot : '-'};
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

// The supervisor: starts the child, enforces the timeout, reports the child's status and makes sure that
// nothing the child started survives. Inside a new PID namespace it is the namespace's init, and the
// kernel kills every remaining process of the namespace when it exits.
[[noreturn]] void run_supervisor(ChildPlan& plan) {
  const int st = plan.status_fd;
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
  plan.guard = guard_filter(getpid(), getpgrp(), options.deny_process_creation);
  plan.readonly_root = options.readonly_root;
  plan.drop_capabilities = options.drop_capabilities;
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
  if (options.isolate_pids) {
    // Like fork, with the supervisor as init of a new PID namespace; refused without CAP_SYS_ADMIN.
    pid = static_cast<pid_t>(syscall(SYS_clone, SIGCHLD | CLONE_NEWPID, nullptr, nullptr, nullptr, nullptr));
    if (pid >= 0) plan.in_pid_namespace = true;
  }
  if (pid < 0) pid = fork();
  if (pid < 0) return unavailable(std::string("sandbox: fork: ") + std::strerror(errno));
  if (pid == 0) run_supervisor(plan);

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
    if (n > 0) status_bytes.append(buf, static_cast<size_t>(n));
    else if (n == 0 || errno != EINTR) status_open = false;
  };
  auto setup_complete = [&]() {
    if (status_bytes.empty()) return false;
    size_t need = status_bytes[0] == kFailureTag ? kFailureBytes
                  : status_bytes[0] == kSetupTag ? kSetupBytes : kReportBytes;
    return status_bytes.size() >= need;
  };
  while (status_open && !setup_complete()) read_status();

  if (!status_bytes.empty() && status_bytes[0] == kFailureTag && setup_complete()) {
    int err = 0;
    std::memcpy(&err, status_bytes.data() + 2, sizeof(int));
    auto step = static_cast<uint8_t>(status_bytes[1]);
    kill(pid, SIGKILL);
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    std::string what = std::string("sandbox: ") + step_name(step) + " failed for '" + options.argv[0] +
                       "': " + std::strerror(err);
    if (step == kStepExec) return not_found(what);
    return failed_precondition(what);
  }
  size_t report_at = std::string::npos;
  if (!status_bytes.empty() && status_bytes[0] == kSetupTag) {
    switch (status_bytes[1]) {
      case kIsolationNetns: result.network_isolation = "netns"; break;
      case kIsolationSeccomp:
        result.network_isolation = "seccomp";
        if (!options.force_seccomp_network) log_seccomp_fallback_once();
        break;
      default: result.network_isolation = "none"; break;
    }
    result.filesystem_isolation = status_bytes[2] == kReadonlyRoot ? "readonly_root" : "none";
    report_at = kSetupBytes;
  } else {
    result.network_isolation = "none";
    result.filesystem_isolation = "none";
    report_at = 0;
  }
  auto report_complete = [&]() { return status_bytes.size() >= report_at + kReportBytes; };

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


Status confine_current_process() {
  const uint32_t self = static_cast<uint32_t>(::getpid());
  std::vector<sock_filter> f;
  add_bpf_prologue(f);
  // Signals: only to this process (kill, tkill and rt_sigqueueinfo take a pid or tid first; tgkill and
  // rt_tgsigqueueinfo a thread group id). Another of its threads has a tid other than `self`: tkill on it
  // is refused, tgkill (what pthread_kill and raise use) is allowed.
  for (uint32_t nr : {static_cast<uint32_t>(__NR_kill), static_cast<uint32_t>(__NR_tkill),
                      static_cast<uint32_t>(__NR_tgkill), static_cast<uint32_t>(__NR_rt_sigqueueinfo),
                      static_cast<uint32_t>(__NR_rt_tgsigqueueinfo)}) {
    f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
    f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 4));
    f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])));
    f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, self, 0, 1));
    f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    f.push_back(BPF_STMT(BPF_RET | BPF_K, kDenyEperm));
  }
  for (uint32_t nr : {static_cast<uint32_t>(__NR_pidfd_send_signal), static_cast<uint32_t>(__NR_pidfd_open),
                      static_cast<uint32_t>(__NR_ptrace), static_cast<uint32_t>(__NR_process_vm_readv),
                      static_cast<uint32_t>(__NR_process_vm_writev)}) {
    add_deny(f, nr, kDenyEperm);
  }
  add_process_creation_denial(f);
  f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  sock_fprog prog{static_cast<unsigned short>(f.size()), f.data()};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return internal_error(std::string("confine: PR_SET_NO_NEW_PRIVS: ") + std::strerror(errno));
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
    return internal_error(std::string("confine: seccomp filter: ") + std::strerror(errno));
  return Status::ok();
}

}  // namespace kiln::sandbox
