// A seccomp filter that refuses new namespaces (user, PID, mount, network) to this process and its children,
// as the default profile of a container runtime does: what a host that cannot confine candidates looks
// like. Test-only.
#pragma once

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace kiln::testing {

// Irreversible for the calling process; returns whether the filter is in place.
inline bool refuse_namespaces() {
  constexpr unsigned kEperm = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
  constexpr unsigned kEnosys = SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA);
  sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1),  // clone3: glibc falls back to clone
      BPF_STMT(BPF_RET | BPF_K, kEnosys),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 1, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_unshare, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])),
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, kEperm),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof code / sizeof code[0]), code};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
  return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0;
}

}  // namespace kiln::testing
