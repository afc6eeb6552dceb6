// SandboxOptions::confine: the confinement of untrusted code (docs/threat-model.md). Each case runs as this
// process's user and, when that is root, once more as an ordinary user in a forked child (the non-root
// path maps the user's own ids into the namespace instead of the sandbox's).

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "kiln/core/files.h"
#include "kiln/sandbox/sandbox.h"
#include "kiln/testing/loopback_listener.h"
#include "kiln/testing/as_user.h"
#include "kiln/testing/no_namespaces.h"

using kiln::sandbox::Bind;
using kiln::sandbox::Confinement;
using kiln::sandbox::run_sandboxed;
using kiln::sandbox::SandboxOptions;
using kiln::sandbox::SandboxResult;

namespace {

using kiln::testing::as_user;

constexpr uint32_t kSandboxUid = 99999;
constexpr uint32_t kNobody = 65534;

// The probe, copied where any user may run it (the build tree may lie under a folder only its owner can
// search), and bound into the child as the tester binds kiln-eval.
struct Probe {
  kiln::TempDir dir{"kiln-confine-probe"};
  std::string path = dir.path() + "/probe";
  Probe() {
    std::filesystem::copy_file(KILN_SANDBOX_PROBE, path);
    ::chmod(dir.path().c_str(), 0755);
    ::chmod(path.c_str(), 0755);
  }
};

// A folder outside /tmp (the child gets a /tmp of its own, which would hide anything there anyway).
class VarTmpDir {
 public:
  VarTmpDir() {
    char name[] = "/var/tmp/kiln-confine-XXXXXX";
    if (::mkdtemp(name) != nullptr) path_ = name;
  }
  ~VarTmpDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  VarTmpDir(const VarTmpDir&) = delete;
  VarTmpDir& operator=(const VarTmpDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A setup of files the child must neither see nor touch: a folder with a secret, a lone secret file and
// a folder it may write nowhere in.
struct Secrets {
  VarTmpDir state;
  VarTmpDir outside;
  std::string dir = state.path() + "/kiln-state";
  std::string file = state.path() + "/kiln.yaml";
  Secrets() {
    (void)kiln::make_dirs(dir);
    (void)kiln::write_file_atomic(dir + "/broker.db", "job table");
    (void)kiln::write_file_atomic(file, "api_key: sk-secret");
    for (const auto& p : {state.path(), dir, outside.path()}) ::chmod(p.c_str(), 0777);
    for (const auto& p : {dir + "/broker.db", file}) ::chmod(p.c_str(), 0666);
  }
};

SandboxOptions confined(const Probe& probe, const Secrets& s, const std::string& scratch,
                        std::vector<std::string> args) {
  SandboxOptions o;
  o.argv = {"/tmp/kiln/bin/probe"};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.env = {"PATH=/usr/bin:/bin"};
  o.working_dir = scratch;
  o.timeout_s = 20;
  Confinement c;
  c.uid = kSandboxUid;
  c.gid = kSandboxUid;
  c.hidden = {s.dir, s.file};
  c.binds = {Bind{probe.dir.path(), "/tmp/kiln/bin", false}};
  o.confine = c;
  return o;
}

SandboxOptions confined_shell(const Probe& probe, const Secrets& s, const std::string& scratch,
                              const std::string& script) {
  SandboxOptions o = confined(probe, s, scratch, {});
  o.argv = {"/bin/sh", "-c", script};
  return o;
}

// The battery every confined child must pass, as whoever runs it; "" when all held.
std::string battery(uint32_t expect_uid) {
  Probe probe;
  Secrets s;
  kiln::TempDir scratch("kiln-confine-scratch");
  ::chmod(scratch.path().c_str(), 0777);
  auto run = [&](SandboxOptions o) -> std::pair<SandboxResult, std::string> {
    auto r = run_sandboxed(o);
    if (!r.is_ok()) return {{}, "run_sandboxed: " + r.status().to_string()};
    return {std::move(r).value(), ""};
  };
  // Writes: nowhere but the working directory and the private /tmp.
  auto [w, werr] =
      run(confined_shell(probe, s, scratch.path(),
                         "touch " + s.outside.path() +
                             "/planted 2>/dev/null && echo outside; "
                             "echo x > " +
                             s.dir +
                             "/broker.db 2>/dev/null && echo state; "
                             "echo x > " +
                             s.file +
                             " 2>/dev/null && echo config; "
                             "touch /etc/kiln-planted 2>/dev/null && echo etc; "
                             "touch made-here && echo scratch; touch /tmp/t && echo tmp; "
                             "touch /dev/shm/t && echo shm; echo probe > /proc/self/comm && echo comm; id -u"));
  if (!werr.empty()) return werr;
  // (A thread may name itself: the CUDA runtime does, through /proc, and will not start where it cannot.)
  const std::string want = "scratch\ntmp\nshm\ncomm\n" + std::to_string(expect_uid) + "\n";
  if (w.stdout_text != want) return "writes: got '" + w.stdout_text + "' want '" + want + "' " + w.stderr_text;
  const std::string want_user = kiln::sandbox::can_map_other_ids() ? "uid" : "userns";
  if (w.user_isolation != want_user || w.child_uid != expect_uid) return "user_isolation " + w.user_isolation;
  if (w.filesystem_isolation != "readonly_root" || w.pid_isolation != "pidns" || w.network_isolation != "netns")
    return "isolation " + w.filesystem_isolation + "/" + w.pid_isolation + "/" + w.network_isolation;
  if (kiln::read_file(s.outside.path() + "/planted").is_ok()) return "planted outside";
  if (*kiln::read_file(s.dir + "/broker.db") != "job table") return "job table changed";
  if (*kiln::read_file(s.file) != "api_key: sk-secret") return "config changed";
  struct stat made {};
  if (::stat((scratch.path() + "/made-here").c_str(), &made) != 0) return "scratch write lost";
  if (made.st_uid != expect_uid) return "scratch file owned by " + std::to_string(made.st_uid);
  // Reads: the hidden folder is empty, the hidden file reads empty; the private /tmp holds only the binds.
  auto [r, rerr] = run(confined_shell(probe, s, scratch.path(),
                                      "ls -A " + s.dir + "; cat " + s.file + "; echo .; ls -A /tmp /tmp/kiln"));
  if (!rerr.empty()) return rerr;
  const std::string want_reads =
      ".\n/tmp:\n.kiln-hidden\nkiln\n" +
      (scratch.path().rfind("/tmp/", 0) == 0 ? scratch.path().substr(5, scratch.path().find('/', 5) - 5) + "\n"
                                             : std::string()) +
      "\n/tmp/kiln:\nbin\n";
  if (r.stdout_text != want_reads) return "reads: got '" + r.stdout_text + "' want '" + want_reads + "'";
  // Processes: the child's namespace holds the child alone.
  // (The supervisor, init of the namespace, and the shell that counts.)
  auto [p, perr] = run(confined_shell(probe, s, scratch.path(), "set -- /proc/[0-9]*; echo $#"));
  if (!perr.empty()) return perr;
  if (p.stdout_text != "2\n") return "processes in sight: " + p.stdout_text;
  // Network: nothing, not even the tester's loopback.
  kiln::testing::LoopbackListener listener;
  auto [n, nerr] = run(confined(probe, s, scratch.path(), {"connect", std::to_string(listener.port)}));
  if (!nerr.empty()) return nerr;
  if (n.exit_code != 1) return "connected: " + n.stdout_text;
  // And root inside cannot undo any of it.
  auto [m, merr] = run(confined(probe, s, scratch.path(), {"remount"}));
  if (!merr.empty()) return merr;
  if (m.exit_code != 1) return "remounted: " + m.stdout_text;
  return "";
}

}  // namespace

TEST_CASE("a confined child writes only its scratch and /tmp, sees no secret, no process, no network",
          "[sandbox][confine]") {
  const bool root = ::geteuid() == 0;
  const uint32_t expect = kiln::sandbox::can_map_other_ids() ? kSandboxUid : ::geteuid();
  CHECK(battery(expect) == "");
  if (root) {
    // An ordinary user: the child keeps that user's id (it is the only one the user may map).
    CHECK(as_user(kNobody, [] { return battery(kNobody); }) == "");
  }
}

TEST_CASE("a bind is read-only unless asked, and reaches a folder its user may not search", "[sandbox][confine]") {
  Probe probe;
  Secrets s;
  kiln::TempDir scratch("kiln-confine-scratch");
  kiln::TempDir locked("kiln-confine-locked");  // 0700: not searchable by the sandbox's uid
  (void)kiln::make_dirs(locked.path() + "/lib");
  (void)kiln::write_file_atomic(locked.path() + "/lib/data", "visible");
  (void)kiln::make_dirs(locked.path() + "/out");
  ::chmod((locked.path() + "/lib").c_str(), 0755);
  ::chmod((locked.path() + "/lib/data").c_str(), 0644);
  ::chmod((locked.path() + "/out").c_str(), 0777);
  ::chmod(scratch.path().c_str(), 0777);
  SandboxOptions o = confined_shell(probe, s, scratch.path(),
                                    "cat /tmp/kiln/lib/data; echo; echo x > /tmp/kiln/lib/data 2>/dev/null && echo "
                                    "wrote-ro; echo y > /tmp/kiln/out/f && echo wrote-rw");
  o.confine->binds.push_back({locked.path() + "/lib", "/tmp/kiln/lib", false});
  o.confine->binds.push_back({locked.path() + "/out", "/tmp/kiln/out", true});
  auto r = run_sandboxed(o);
  INFO(r.status().to_string());
  REQUIRE(r.is_ok());
  INFO(r->stderr_text);
  CHECK(r->stdout_text == "visible\nwrote-rw\n");
  CHECK(*kiln::read_file(locked.path() + "/lib/data") == "visible");
  CHECK(*kiln::read_file(locked.path() + "/out/f") == "y\n");
}

TEST_CASE("confinement fails closed: a step that cannot be set up fails the run, naming it", "[sandbox][confine]") {
  Probe probe;
  Secrets s;
  kiln::TempDir scratch("kiln-confine-scratch");
  SECTION("a bind whose source is missing") {
    SandboxOptions o = confined(probe, s, scratch.path(), {"pid"});
    o.confine->binds.push_back({"/nonexistent/kiln", "/tmp/kiln/x", false});
    auto r = run_sandboxed(o);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message().find("cannot bind /nonexistent/kiln") != std::string::npos);
  }
  SECTION("a bind that would land under a hidden path") {
    SandboxOptions o = confined(probe, s, scratch.path(), {"pid"});
    o.confine->hidden.push_back("/tmp");
    auto r = run_sandboxed(o);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message().find("lies under hidden /tmp") != std::string::npos);
  }
  SECTION("no namespace may be made here (as a container's seccomp profile refuses them)") {
    // In a forked child that refuses itself new namespaces, the way Docker's default profile does.
    std::string why = as_user(::geteuid(), [&] {
      if (!kiln::testing::refuse_namespaces()) return std::string("could not install the filter");
      auto r = run_sandboxed(confined(probe, s, scratch.path(), {"pid"}));
      if (r.is_ok()) return std::string("ran unconfined: ") + r->user_isolation;
      if (r.status().message().find("PID namespace here: Operation not permitted") == std::string::npos)
        return r.status().message();
      return std::string();
    });
    CHECK(why == "");
  }
}
