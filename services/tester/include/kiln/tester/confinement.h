// How the tester confines every run of the evaluation child (DESIGN §5 "Isolation", docs/threat-model.md):
// the sandbox's confinement (libs/sandbox) with what the child needs bound in at fixed places under its
// private /tmp (the evaluator, its library folders, the device lock folder) and Kiln's own files hidden
// (the state directory with the job table, the archive, logs and caches; the config; the registry; the
// user's home). Where it cannot be set up the tester refuses to evaluate, unless tester.allow_unconfined.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/config/config.h"
#include "kiln/core/status.h"
#include "kiln/sandbox/sandbox.h"

namespace kiln::tester {

// Where the child finds what the tester binds in.
inline constexpr const char* kChildBinDir = "/tmp/kiln/bin";
inline constexpr const char* kChildLockDir = "/tmp/kiln/locks";
inline constexpr const char* kChildLibDir = "/tmp/kiln/lib";  // one folder per LD_LIBRARY_PATH entry: lib0, lib1...

struct ConfinementPolicy {
  uint32_t sandbox_uid = 99000;     // as root, slot k's child runs as uid and gid sandbox_uid + k
  std::vector<std::string> hidden;  // absolute paths the child must not see
  std::string eval_binary;          // kiln-eval or kiln-eval-cuda, outside
  std::string lock_dir;             // the device lock folder, outside ("" = none)
  // The LD_LIBRARY_PATH entries, outside, and whether each is bound into the child (at kChildLibDir<i>):
  // only those the child could not reach at their own path (a folder of the tester's user that others may
  // not search, or one under /tmp, /dev/shm or a hidden path, which the child sees replaced). The rest stay
  // where they are: the CUDA driver's library finds its companions from its own path and will not start
  // from another place (cudaErrorOperatingSystem).
  struct LibDir {
    std::string outside;
    bool bound = false;
  };
  std::vector<LibDir> libs;

  // Takes the folders of `ld_library_path` (':'-separated; missing folders skipped) into `libs`, each bound
  // or not as above. Call after `hidden` is set.
  void add_library_path(const std::string& ld_library_path);

  // The same paths as the child sees them.
  std::string eval_binary_in_child() const;
  std::string lock_file_in_child(const std::string& lock_file) const;
  std::string library_path_in_child() const;  // for LD_LIBRARY_PATH; "" when there is none
  // The ids of slot `slot`'s child (as root; elsewhere the tester's own).
  uint32_t uid_for_slot(int slot) const;
  // The sandbox's confinement for slot `slot`'s child.
  sandbox::Confinement for_slot(int slot) const;
};

// Kiln's own files in `config` and beside it: `state_dir` (job table, archive, logs, compile cache, locks),
// every path the config names outside it, the config file itself, the registry folder (relative paths
// resolve against `state_dir` or, for the registry, the working directory) and `home` unless it is "/".
// Absolute, each once; paths that do not exist are left to the sandbox to skip.
std::vector<std::string> kiln_private_paths(const config::KilnConfig& config, const std::string& state_dir,
                                            const std::string& home);

// Whether any user may reach `dir`: every folder from the root down searchable by others, `dir` readable.
bool reachable_by_anyone(const std::string& dir);

// Whether `dir` is out of the child's sight at its own path: under /tmp or /dev/shm (private in the child)
// or under a hidden path. Such a library folder is bound into the child whoever runs the tester.
bool covered_in_child(const std::string& dir, const std::vector<std::string>& hidden);

// The home folder of the user this process runs as ($HOME, else the password database), or "".
std::string own_home();

// Whether the confinement works here: one confined run of the evaluator (`--help`) as slot 0's child.
// The error says what failed.
Status check_confinement(const ConfinementPolicy& policy);

// Hands the scratch folder (and everything in it) to `uid`/`gid`, so a child running as them can use it.
Status give_scratch(const std::string& dir, uint32_t uid, uint32_t gid);

}  // namespace kiln::tester
