#include "filters.h"

#include <linux/audit.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "kiln/sandbox/sandbox.h"

namespace kiln::sandbox {
namespace detail {
namespace {

#if defined(__x86_64__)
constexpr uint32_t kNativeAuditArch = AUDIT_ARCH_X86_64;
constexpr uint32_t kForeignSyscallBit = 0x40000000u;  // x32 ABI syscalls share the x86_64 arch value
#elif defined(__aarch64__)
constexpr uint32_t kNativeAuditArch = AUDIT_ARCH_AARCH64;
constexpr uint32_t kForeignSyscallBit = 0;
#else
#error "kiln::sandbox: no seccomp arch value for this CPU"
#endif

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

}  // namespace

GuardFilter guard_filter(pid_t caller_pid, pid_t caller_pgid, bool deny_process_creation) {
  constexpr uint32_t kPlaceholder = 0;  // pid 0 never names another process: kill(0) is the own group
  GuardFilter g;
  add_bpf_prologue(g.code);
  const std::vector<uint32_t> targets = {static_cast<uint32_t>(-1), static_cast<uint32_t>(caller_pid),
                                         static_cast<uint32_t>(-caller_pgid), kPlaceholder, kPlaceholder};
  for (uint32_t nr :
       {static_cast<uint32_t>(__NR_kill), static_cast<uint32_t>(__NR_tkill), static_cast<uint32_t>(__NR_tgkill)}) {
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

}  // namespace detail

Status confine_current_process() {
  const uint32_t self = static_cast<uint32_t>(::getpid());
  std::vector<sock_filter> f;
  detail::add_bpf_prologue(f);
  // Signals: only to this process (kill, tkill and rt_sigqueueinfo take a pid or tid first; tgkill and
  // rt_tgsigqueueinfo a thread group id). Another of its threads has a tid other than `self`: tkill on it
  // is refused, tgkill (what pthread_kill and raise use) is allowed.
  for (uint32_t nr :
       {static_cast<uint32_t>(__NR_kill), static_cast<uint32_t>(__NR_tkill), static_cast<uint32_t>(__NR_tgkill),
        static_cast<uint32_t>(__NR_rt_sigqueueinfo), static_cast<uint32_t>(__NR_rt_tgsigqueueinfo)}) {
    f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
    f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 4));
    f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])));
    f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, self, 0, 1));
    f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    f.push_back(BPF_STMT(BPF_RET | BPF_K, detail::kDenyEperm));
  }
  for (uint32_t nr : {static_cast<uint32_t>(__NR_pidfd_send_signal), static_cast<uint32_t>(__NR_pidfd_open),
                      static_cast<uint32_t>(__NR_ptrace), static_cast<uint32_t>(__NR_process_vm_readv),
                      static_cast<uint32_t>(__NR_process_vm_writev)}) {
    detail::add_deny(f, nr, detail::kDenyEperm);
  }
  detail::add_process_creation_denial(f);
  f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  sock_fprog prog{static_cast<unsigned short>(f.size()), f.data()};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return internal_error(std::string("confine: PR_SET_NO_NEW_PRIVS: ") + std::strerror(errno));
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
    return internal_error(std::string("confine: seccomp filter: ") + std::strerror(errno));
  return Status::ok();
}

}  // namespace kiln::sandbox
