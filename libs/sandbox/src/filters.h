// The seccomp filters of the sandbox: the guard every child gets and the network filter used where network
// namespaces are not permitted. Private to libs/sandbox.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <cstddef>
#include <vector>

namespace kiln::sandbox::detail {

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

// The guard for a child of the caller `caller_pid` (process group `caller_pgid`); its supervisor's pid is
// patched into the slots after fork.
GuardFilter guard_filter(pid_t caller_pid, pid_t caller_pgid, bool deny_process_creation);

// Refuses socket() for the internet and raw packet families with EPERM; everything else is allowed.
std::vector<sock_filter> network_filter();

}  // namespace kiln::sandbox::detail
