// The sandboxed child and its supervisor, after fork: everything they need is prepared by the caller in a
// ChildPlan, and they report to it over the status pipe. Private to libs/sandbox.
#pragma once

#include <linux/filter.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "filters.h"

namespace kiln::sandbox::detail {

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
  kStepProc,
  kStepBind,
  kStepHide,
  kStepTmpfs,
  kStepIdentity,
  kStepNetns,
  kStepUserns,
};

const char* step_name(uint8_t step);

// The status pipe carries, in order: the child's setup message (kSetupTag, how the network was isolated,
// whether the root is read-only, whether it runs in a user namespace) or a failure (kFailureTag, step,
// errno); then the supervisor's report (kReportTag, the child's wait status, whether it timed out).
inline constexpr char kIsolationNetns = 'n';
inline constexpr char kIsolationSeccomp = 's';
inline constexpr char kIsolationNone = '0';
inline constexpr char kReadonlyRoot = 'r';
inline constexpr char kUserNamespace = 'u';
inline constexpr char kSetupTag = 'N';
inline constexpr char kFailureTag = 'E';
inline constexpr char kReportTag = 'R';
inline constexpr size_t kSetupBytes = 4;
inline constexpr size_t kFailureBytes = 2 + sizeof(int);
inline constexpr size_t kReportBytes = 1 + sizeof(int) + 1;

// A path to cover inside a confined child, or one to mount there (Confinement).
struct HiddenPlan {
  std::string path;
  bool is_dir = false;
};
struct BindPlan {
  std::string outside;
  std::string inside;
  bool is_dir = false;
  bool writable = false;
  int fd = -1;  // opened (O_PATH) by the child before its root turns read-only
};

// SandboxOptions::confine, resolved by the caller: paths made absolute and real, their kinds known. Two
// ways to the sandbox's ids: a caller that may map other ids (root with CAP_SETUID) makes the mounts as
// root and then takes `uid`/`gid` itself (no user namespace: the child holds no capability anywhere);
// any other caller's child runs in a user namespace of its own that maps the caller's own ids (the only
// ones the kernel lets it map), where it makes the mounts with the namespace's capabilities.
struct ConfinePlan {
  bool on = false;
  bool user_namespace = false;
  uid_t uid = 0;  // the child's ids (inside and outside alike in a user namespace)
  gid_t gid = 0;
  std::vector<HiddenPlan> hidden;
  std::vector<BindPlan> binds;   // the working directory is the first
  std::string tmp_options;       // mount options of the private /tmp
  std::string uid_map, gid_map;  // "<id> <id> 1\n", written by the supervisor (user namespace only)
};

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
  ConfinePlan confine;
  sock_fprog filter_prog{};
  GuardFilter guard;
  double timeout_s = 0;
  pid_t parent_pid = 0;
  pid_t supervisor_pid = 0;  // as the child sees it (1 inside a PID namespace)
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1, status_fd = -1;
};

// Runs in the forked supervisor: starts the child (which execs plan.exe), enforces the timeout, writes
// the report to plan.status_fd and exits. Only async-signal-safe calls.
[[noreturn]] void run_supervisor(ChildPlan& plan);

}  // namespace kiln::sandbox::detail
