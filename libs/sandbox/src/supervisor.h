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
};

const char* step_name(uint8_t step);

// The status pipe carries, in order: the child's setup message (kSetupTag, how the network was isolated,
// whether the root is read-only) or a failure (kFailureTag, step, errno); then the supervisor's report
// (kReportTag, the child's wait status, whether it timed out).
inline constexpr char kIsolationNetns = 'n';
inline constexpr char kIsolationSeccomp = 's';
inline constexpr char kIsolationNone = '0';
inline constexpr char kReadonlyRoot = 'r';
inline constexpr char kSetupTag = 'N';
inline constexpr char kFailureTag = 'E';
inline constexpr char kReportTag = 'R';
inline constexpr size_t kSetupBytes = 3;
inline constexpr size_t kFailureBytes = 2 + sizeof(int);
inline constexpr size_t kReportBytes = 1 + sizeof(int) + 1;

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

// Runs in the forked supervisor: starts the child (which execs plan.exe), enforces the timeout, writes
// the report to plan.status_fd and exits. Only async-signal-safe calls.
[[noreturn]] void run_supervisor(ChildPlan& plan);

}  // namespace kiln::sandbox::detail
