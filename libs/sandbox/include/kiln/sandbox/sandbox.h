// Running an untrusted child process (DESIGN §5 "Isolation"): its own process group that is killed as a
// whole on timeout and after the leader exits, no network, an empty scratch directory, exactly the
// environment it is given, resource limits, and its output captured through pipes with a cap.
//
// Every run goes through a small supervisor process forked from the caller. Where the kernel permits it
// the supervisor is the init of a new PID namespace, so when it exits the kernel kills every process the
// child left behind, including ones that left the process group with setsid(); elsewhere it is a child
// subreaper that kills every descendant it inherits. Every child also gets a seccomp guard: no kill(-1),
// no signal to the caller or the supervisor, no ptrace or process_vm_readv/writev, no pidfd_open.
// docs/threat-model.md says what each layer defends and what it does not.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/status.h"

namespace kiln::sandbox {

// A path of the caller's file system made visible inside a confined child (SandboxOptions::confine) at
// `inside`, an absolute path under the child's private /tmp (or one that exists in its read-only root).
// Read-only unless `writable`. Binds are reached without walking the path outside, so a child that runs as
// another user reaches them even where that user may not search their parents (a tree under /root).
struct Bind {
  std::string outside;
  std::string inside;
  bool writable = false;
};

// The confinement of code nobody trusts (DESIGN §5 "Isolation", docs/threat-model.md). The child runs as
// `uid`/`gid` with no capability when the caller may take other ids (root with CAP_SETUID/CAP_SETGID);
// otherwise in a user namespace of its own that maps the caller's own ids, the only ones it may map. In
// either case: in a PID namespace (a fresh /proc, nothing else in sight), a network namespace (a down
// loopback) and a mount namespace where every mount is read-only, each of `hidden` is covered (a
// directory by an empty read-only tmpfs, a file by an empty one; paths under /tmp need no cover), /tmp
// and /dev/shm are private tmpfs, and the working directory and `binds` are mounted at their places.
// Nothing falls back: a step that cannot be set up here fails the run, naming the step.
struct Confinement {
  uint32_t uid = 0;  // the child's ids, when the caller may take them (0: the caller's own)
  uint32_t gid = 0;
  std::vector<std::string> hidden;  // absolute; a path that does not exist is skipped
  std::vector<Bind> binds;
  int64_t tmp_bytes = int64_t{256} << 20;  // the private /tmp's size (the working dir is not counted)
};

struct SandboxOptions {
  std::vector<std::string> argv;  // argv[0] without a '/' is looked up in the PATH of `env`
  std::string working_dir;        // the child's cwd (an empty scratch dir); empty = inherit
  std::vector<std::string> env;   // "KEY=VALUE", passed exactly; nothing is inherited
  double timeout_s = 60;          // wall clock; the whole process group is SIGKILLed when it passes
  // Resource limits; 0 = leave as inherited. Core dumps are always off.
  int64_t cpu_time_s = 0;
  int64_t address_space_bytes = 0;
  int64_t file_size_bytes = 0;
  int64_t max_processes = 0;           // RLIMIT_NPROC: per user, and not enforced for root
  size_t max_output_bytes = 1u << 20;  // per stream; the middle of a longer stream is dropped
  bool isolate_network = true;
  // Skip the network namespace and go straight to the seccomp filter (to test the fallback).
  bool force_seccomp_network = false;
  std::vector<int> cpu_affinity;  // cores the child may run on; empty = inherit

  // Run the child inside a new PID namespace where permitted (else the subreaper fallback): it cannot
  // see or signal the caller, and nothing it starts outlives the run.
  bool isolate_pids = true;
  // A seccomp filter makes fork, vfork and clone without CLONE_THREAD fail with EPERM (threads still
  // work). RLIMIT_NPROC does not bind root; this does. Off by default: compilers must fork.
  bool deny_process_creation = false;
  // In a new mount namespace, remount every mount read-only except `working_dir` (where permitted; see
  // SandboxResult::filesystem_isolation). Off by default: a compiler may write elsewhere (e.g. /tmp).
  bool readonly_root = false;
  // Drop every capability (bounding, effective, permitted, ambient) before exec, so a child running as
  // root cannot undo the above (remount, raise rlimits, ptrace across users).
  bool drop_capabilities = true;
  // Confine the child as Confinement says, or fail the run: no fallback. When set it implies (and
  // replaces) isolate_pids, isolate_network, readonly_root and drop_capabilities.
  std::optional<Confinement> confine;
};

struct SandboxResult {
  int exit_code = -1;   // -1 when killed by a signal
  int term_signal = 0;  // the signal that ended the leader, 0 if it exited
  bool timed_out = false;
  std::string stdout_text;  // capped: "[... N bytes dropped]" marks what was cut
  std::string stderr_text;
  double wall_s = 0;
  std::string network_isolation;     // netns | seccomp | none
  std::string pid_isolation;         // pidns | subreaper
  std::string filesystem_isolation;  // readonly_root | none (not requested, or not permitted here)
  // SandboxOptions::confine: "uid" (the child ran as the sandbox's uid `child_uid`) or "userns" (in a user
  // namespace, as the caller's own uid `child_uid`); "none" otherwise.
  std::string user_isolation = "none";
  int64_t child_uid = -1;  // the child's uid outside, when confined

  bool succeeded() const { return !timed_out && term_signal == 0 && exit_code == 0; }
  // The exit code, or -N when signal N ended the leader (the subprocess convention; a run killed at its
  // timeout reads -SIGKILL).
  int returncode() const { return term_signal != 0 ? -term_signal : exit_code; }
  // "exit code 3", "killed by SIGSEGV", "timed out after 30 s"
  std::string describe(double timeout_s) const;
};

// For a process that runs untrusted code itself (the evaluation runner, docs/threat-model.md): from now on
// it may not create processes (fork, vfork and clone without CLONE_THREAD fail with EPERM, clone3 with
// ENOSYS: threads still work) and may signal only itself (kill, tkill, tgkill, rt_sigqueueinfo and
// rt_tgsigqueueinfo aimed at any other pid, its process group or -1 fail with EPERM; pidfd_send_signal,
// ptrace and process_vm_readv/writev always do). Sets PR_SET_NO_NEW_PRIVS. Irreversible, and inherited by
// every thread created afterwards.
Status confine_current_process();

// Whether this process may run a confined child as other ids (Confinement::uid): root with CAP_SETUID and
// CAP_SETGID.
bool can_map_other_ids();

// Runs the child to completion. An error means the child could not be started (bad argv, exec failed,
// no way to isolate the network); whatever the child itself does is a SandboxResult.
Result<SandboxResult> run_sandboxed(const SandboxOptions& options);

// "SIGSEGV" for SIGSEGV, "signal 77" for one without a name.
std::string signal_description(int sig);

// "30 s", "0.5 s": a duration as people read it in messages.
std::string format_seconds(double s);

}  // namespace kiln::sandbox
