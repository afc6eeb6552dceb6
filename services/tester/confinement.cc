#include "kiln/tester/confinement.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "kiln/core/files.h"

namespace kiln::tester {
namespace {

namespace fs = std::filesystem;

std::string basename_of(const std::string& path) { return fs::path(path).filename().string(); }

// `path` against `base` when relative; lexically normal.
std::string absolute_against(const std::string& path, const std::string& base) {
  if (path.empty()) return {};
  fs::path p(path);
  if (p.is_relative()) p = fs::path(base) / p;
  return p.lexically_normal().string();
}

// The first `max_bytes` of what a run printed on stderr, without trailing blanks.
std::string stderr_head(const sandbox::SandboxResult& ran, size_t max_bytes) {
  std::string head = ran.stderr_text.substr(0, max_bytes);
  while (!head.empty() && (head.back() == '\n' || head.back() == ' ')) head.pop_back();
  return head;
}

}  // namespace

std::string ConfinementPolicy::eval_binary_in_child() const {
  return std::string(kChildBinDir) + "/" + basename_of(eval_binary);
}

std::string ConfinementPolicy::lock_file_in_child(const std::string& lock_file) const {
  return std::string(kChildLockDir) + "/" + basename_of(lock_file);
}

std::string ConfinementPolicy::library_path_in_child() const {
  std::string out;
  for (size_t i = 0; i < libs.size(); ++i)
    out += (out.empty() ? "" : ":") + (libs[i].bound ? std::string(kChildLibDir) + std::to_string(i) : libs[i].outside);
  return out;
}

void ConfinementPolicy::add_library_path(const std::string& ld_library_path) {
  for (size_t at = 0; at <= ld_library_path.size();) {
    size_t end = ld_library_path.find(':', at);
    if (end == std::string::npos) end = ld_library_path.size();
    if (std::string dir = ld_library_path.substr(at, end - at); !dir.empty() && fs::is_directory(dir)) {
      const bool bound = (sandbox::can_map_other_ids() && !reachable_by_anyone(dir)) || covered_in_child(dir, hidden);
      libs.push_back({std::move(dir), bound});
    }
    at = end + 1;
  }
}

bool reachable_by_anyone(const std::string& dir) {
  std::error_code ec;
  const fs::path real = fs::canonical(dir, ec);
  if (ec) return false;
  struct stat st {};
  if (::stat(real.c_str(), &st) != 0 || (st.st_mode & (S_IROTH | S_IXOTH)) != (S_IROTH | S_IXOTH)) return false;
  for (fs::path p = real.parent_path();; p = p.parent_path()) {
    if (::stat(p.c_str(), &st) != 0 || (st.st_mode & S_IXOTH) == 0) return false;
    if (p == p.root_path()) return true;
  }
}

bool covered_in_child(const std::string& dir, const std::vector<std::string>& hidden) {
  std::error_code ec;
  const fs::path real = fs::weakly_canonical(dir, ec);
  if (ec) return true;  // not to be found at its own path, whatever it is: bind it
  auto under = [&](const fs::path& top) {
    auto [t, r] = std::mismatch(top.begin(), top.end(), real.begin(), real.end());
    return t == top.end();
  };
  for (const char* replaced : {"/tmp", "/dev/shm"})
    if (under(replaced)) return true;
  for (const std::string& h : hidden)
    if (!h.empty() && under(fs::weakly_canonical(h, ec))) return true;
  return false;
}

uint32_t ConfinementPolicy::uid_for_slot(int slot) const {
  return sandbox::can_map_other_ids() ? sandbox_uid + static_cast<uint32_t>(std::max(slot, 0))
                                      : static_cast<uint32_t>(geteuid());
}

sandbox::Confinement ConfinementPolicy::for_slot(int slot) const {
  sandbox::Confinement c;
  c.uid = c.gid = sandbox_uid + static_cast<uint32_t>(std::max(slot, 0));
  c.hidden = hidden;
  c.binds.push_back({fs::path(eval_binary).parent_path().string(), kChildBinDir, false});
  if (!lock_dir.empty()) c.binds.push_back({lock_dir, kChildLockDir, false});
  for (size_t i = 0; i < libs.size(); ++i)
    if (libs[i].bound) c.binds.push_back({libs[i].outside, std::string(kChildLibDir) + std::to_string(i), false});
  return c;
}

std::vector<std::string> kiln_private_paths(const config::KilnConfig& config, const std::string& state_dir,
                                            const std::string& home) {
  std::error_code ec;
  const std::string cwd = fs::current_path(ec).string();
  std::vector<std::string> paths;
  auto add = [&](const std::string& p) {
    if (p.empty() || p == "/") return;
    if (std::find(paths.begin(), paths.end(), p) == paths.end()) paths.push_back(p);
  };
  const std::string state = absolute_against(state_dir, cwd);
  add(state);
  for (const std::string* p :
       {&config.broker.db_path, &config.broker.external_secret_key_file, &config.broker.external_public_key_file,
        &config.broker.external_allowlist, &config.compiler.cache_dir, &config.scorer.db_path}) {
    add(absolute_against(*p, state));
  }
  add(absolute_against(config.promoter.registry_dir, cwd));
  // The GPU claims are flocks shared by the testers of a host: a candidate could hold one open and starve them.
  add(absolute_against(config.tester.gpu_claim_dir, cwd));
  if (!config.source.empty() && config.source != "defaults") add(absolute_against(config.source, cwd));
  add(home);
  return paths;
}

std::string own_home() {
  if (const char* h = std::getenv("HOME"); h && *h) return h;
  if (const passwd* pw = getpwuid(geteuid()); pw && pw->pw_dir) return pw->pw_dir;
  return {};
}

Status check_confinement(const ConfinementPolicy& policy) {
  TempDir scratch("kiln-confine-check");
  if (sandbox::can_map_other_ids())
    KILN_RETURN_IF_ERROR(give_scratch(scratch.path(), policy.uid_for_slot(0), policy.uid_for_slot(0)));
  sandbox::SandboxOptions run;
  run.argv = {policy.eval_binary_in_child(), "--help"};
  run.working_dir = scratch.path();
  run.env = {"PATH=/usr/bin:/bin"};
  if (std::string lib = policy.library_path_in_child(); !lib.empty()) run.env.push_back("LD_LIBRARY_PATH=" + lib);
  run.timeout_s = 30;
  run.confine = policy.for_slot(0);
  auto ran = sandbox::run_sandboxed(run);
  if (!ran.is_ok()) {
    if (ran.status().message().find("exec failed") != std::string::npos)
      return failed_precondition(ran.status().message() + " (uid " + std::to_string(policy.uid_for_slot(0)) +
                                 " must be able to read and run the evaluator and search its folder)");
    return ran.status();
  }
  // What the evaluator answers does not matter (--help is a usage error): that it was started confined
  // does. A program its ids may not run is an error of run_sandboxed ("exec failed ..."); one the dynamic
  // loader could not start (its libraries out of the child's sight) exits 127 and says why.
  if (ran->exit_code == 127)
    return failed_precondition("the evaluator does not start confined (exit code 127): " + stderr_head(*ran, 400));
  if (ran->user_isolation == "none" || ran->filesystem_isolation != "readonly_root") {
    const std::string err = stderr_head(*ran, 300);
    return failed_precondition("sandbox: confinement did not hold (" + ran->user_isolation + ", " +
                               ran->filesystem_isolation + "; the run: " + ran->describe(run.timeout_s) +
                               (err.empty() ? "" : "; " + err) + ")");
  }
  return Status::ok();
}

Status give_scratch(const std::string& dir, uint32_t uid, uint32_t gid) {
  auto give = [&](const fs::path& p) -> Status {
    if (::lchown(p.c_str(), uid, gid) != 0)
      return unavailable("scratch " + p.string() + ": chown to " + std::to_string(uid) + ": " + std::strerror(errno));
    return Status::ok();
  };
  KILN_RETURN_IF_ERROR(give(dir));
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    KILN_RETURN_IF_ERROR(give(it->path()));
  }
  if (ec) return unavailable("scratch " + dir + ": " + ec.message());
  return Status::ok();
}

}  // namespace kiln::tester
