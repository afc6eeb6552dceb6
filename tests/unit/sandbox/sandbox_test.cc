#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <cerrno>
#include <thread>

#include "kiln/core/files.h"
#include "kiln/sandbox/sandbox.h"
#include "kiln/testing/loopback_listener.h"
#include "kiln/testing/skip.h"

using kiln::sandbox::run_sandboxed;
using kiln::sandbox::SandboxOptions;
using kiln::sandbox::SandboxResult;

namespace {

const std::vector<std::string> kEnv = {"PATH=/usr/local/bin:/usr/bin:/bin"};

SandboxResult run_ok(SandboxOptions options) {
  auto r = run_sandboxed(options);
  INFO(r.status().to_string());
  REQUIRE(r.is_ok());
  return std::move(r).value();
}

SandboxOptions shell(const std::string& script, double timeout_s = 10) {
  SandboxOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.env = kEnv;
  o.timeout_s = timeout_s;
  return o;
}

// Alive means present and not a zombie (a killed orphan may linger as a zombie under init).
bool process_alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  auto close_paren = line.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < line.size() && line[close_paren + 2] != 'Z';
}

// Live processes whose command line contains `token`. Pids inside the sandbox's PID namespace mean
// nothing here, so tests find the processes a probe left behind by a unique argument instead.
std::vector<pid_t> processes_with_arg(const std::string& token) {
  std::vector<pid_t> found;
  DIR* proc = opendir("/proc");
  if (!proc) return found;
  while (dirent* e = readdir(proc)) {
    std::string name = e->d_name;
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in("/proc/" + name + "/cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    pid_t pid = std::stoi(name);
    if (cmdline.find(token) != std::string::npos && process_alive(pid)) found.push_back(pid);
  }
  closedir(proc);
  return found;
}

// Waits up to 2 s for every process with `token` in its command line to be gone.
bool all_gone(const std::string& token) {
  for (int i = 0; i < 200; ++i) {
    if (processes_with_arg(token).empty()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace

TEST_CASE("exit code and output are captured", "[sandbox]") {
  auto r = run_ok(shell("echo out; echo err >&2; exit 7"));
  CHECK(r.exit_code == 7);
  CHECK(r.term_signal == 0);
  CHECK_FALSE(r.timed_out);
  CHECK(r.stdout_text == "out\n");
  CHECK(r.stderr_text == "err\n");
  CHECK(r.describe(10) == "exit code 7");
  CHECK(r.returncode() == 7);
}

TEST_CASE("a crash is reported by signal", "[sandbox]") {
  SandboxOptions o;
  o.argv = {KILN_SANDBOX_PROBE, "crash"};
  auto r = run_ok(o);
  CHECK(r.term_signal == SIGSEGV);
  CHECK(r.describe(10) == "killed by SIGSEGV");
  CHECK(r.returncode() == -SIGSEGV);
  CHECK(kiln::sandbox::signal_description(SIGSEGV) == "SIGSEGV");
  CHECK(kiln::sandbox::signal_description(SIGXFSZ) == "SIGXFSZ");
}

TEST_CASE("a child that outlives its timeout is killed", "[sandbox]") {
  SandboxOptions o;
  o.argv = {"sleep", "100"};
  o.env = kEnv;
  o.timeout_s = 0.3;
  auto r = run_ok(o);
  CHECK(r.timed_out);
  CHECK(r.term_signal == SIGKILL);
  CHECK(r.wall_s < 5);
  CHECK(r.describe(o.timeout_s) == "timed out after 0.3 s");
  CHECK(r.returncode() == -SIGKILL);
}

TEST_CASE("the whole process group dies with the leader", "[sandbox]") {
  kiln::TempDir dir("kiln-sandbox-test");
  SandboxOptions o;
  o.working_dir = dir.path();
  const std::string token = dir.path() + "/pid";
  o.argv = {KILN_SANDBOX_PROBE, "grandchild", token};
  SECTION("in a PID namespace where permitted") {}
  SECTION("with the subreaper fallback") { o.isolate_pids = false; }
  auto r = run_ok(o);
  CHECK(r.exit_code == 0);
  REQUIRE(kiln::read_file(token).is_ok());
  CHECK(all_gone(token));
}

TEST_CASE("a grandchild that escapes with setsid() is killed too", "[sandbox]") {
  for (bool pidns : {true, false}) {
    kiln::TempDir dir("kiln-sandbox-test");
    SandboxOptions o;
    o.working_dir = dir.path();
    o.isolate_pids = pidns;  // false: the subreaper fallback
    const std::string token = dir.path() + "/escaped";
    o.argv = {KILN_SANDBOX_PROBE, "setsid", token};
    auto r = run_ok(o);
    CHECK(r.exit_code == 0);
    CHECK(r.wall_s < 5);
    if (!pidns) CHECK(r.pid_isolation == "subreaper");
    REQUIRE(kiln::read_file(token).is_ok());  // the escape really happened
    CHECK(all_gone(token));
  }
}

TEST_CASE("the child runs in its own PID namespace where permitted", "[sandbox]") {
  SandboxOptions o;
  o.argv = {KILN_SANDBOX_PROBE, "pid"};
  auto r = run_ok(o);
  if (r.pid_isolation != "pidns") KILN_SKIP("PID namespaces are not permitted here: the subreaper fallback is in use");
  // The supervisor is the namespace's init (pid 1), the child its first process.
  CHECK(r.stdout_text == "2\n");
}

TEST_CASE("a fork bomb is contained", "[sandbox]") {
  kiln::TempDir dir("kiln-sandbox-test");
  const std::string tag = dir.path() + "/bomb";  // names this test's processes on the command line
  SandboxOptions o;
  o.argv = {KILN_SANDBOX_PROBE, "fork-bomb", "200", tag};
  o.working_dir = dir.path();
  SECTION("refused by the seccomp filter; threads still start") {
    o.timeout_s = 60;  // it ends by itself at once; the limit only guards a broken filter
    o.deny_process_creation = true;
    auto r = run_ok(o);
    CHECK(r.exit_code == 1);
    CHECK(r.stdout_text == "thread: ok\nfork: Operation not permitted\n");
    CHECK_FALSE(r.timed_out);
  }
  SECTION("allowed, every process is killed at the timeout") {
    // Long enough for the probe to start and fork on a loaded 2-core machine before it is killed.
    o.timeout_s = 3;
    for (bool pidns : {true, false}) {
      o.isolate_pids = pidns;
      auto r = run_ok(o);
      CHECK(r.timed_out);
      CHECK(r.stdout_text == "thread: ok\nforked\n");
      CHECK(r.wall_s < 10);
      CHECK(all_gone(tag));
    }
  }
}

TEST_CASE("the tester's secrets are not visible to the child", "[sandbox]") {
  // A variable the test process had when it started is in its /proc/<pid>/environ; that is what a
  // child could read if it could see this process.
  std::ifstream self("/proc/self/environ", std::ios::binary);
  std::string environ((std::istreambuf_iterator<char>(self)), std::istreambuf_iterator<char>());
  std::string marker;
  for (size_t at = 0; at < environ.size();) {
    size_t end = environ.find('\0', at);
    std::string kv = environ.substr(at, end - at);
    if (kv.rfind("PATH=", 0) != 0 && kv.size() > 8) {
      marker = kv;
      break;
    }
    at = end == std::string::npos ? environ.size() : end + 1;
  }
  REQUIRE_FALSE(marker.empty());
  ::setenv("OPENAI_API_KEY", "sk-kiln-test-not-a-real-key", 1);

  SandboxOptions o;
  o.argv = {KILN_SANDBOX_PROBE, "environ", marker};
  o.env = kEnv;
  SECTION("isolated: neither the environment nor /proc shows them") {
    auto r = run_ok(o);
    INFO(r.stdout_text);
    CHECK(r.stdout_text.rfind("OPENAI_API_KEY=(unset)\n", 0) == 0);
    if (r.pid_isolation == "pidns") {
      CHECK(r.exit_code == 0);
    } else {
      WARN("no PID namespace here: /proc/<tester>/environ is readable by the child (see the threat model)");
    }
  }
  SECTION("without a PID namespace and with capabilities kept, /proc/<tester>/environ leaks") {
    // (Without a PID namespace, only the capability check guards it: a child that has dropped its
    // capabilities cannot read a process that holds some. A tester without capabilities is exposed.)
    o.isolate_pids = false;
    o.drop_capabilities = false;
    auto r = run_ok(o);
    CHECK(r.stdout_text.rfind("OPENAI_API_KEY=(unset)\n", 0) == 0);
    CHECK(r.exit_code == 1);
    CHECK(r.stdout_text.find("found in " + std::to_string(getpid()) + "\n") != std::string::npos);
  }
  ::unsetenv("OPENAI_API_KEY");
}

TEST_CASE("writes outside the scratch directory fail with a read-only root", "[sandbox]") {
  kiln::TempDir scratch("kiln-sandbox-test");
  kiln::TempDir outside("kiln-sandbox-outside");
  SandboxOptions o;
  o.working_dir = scratch.path();
  o.readonly_root = true;
  o.argv = {KILN_SANDBOX_PROBE, "write", outside.path() + "/planted"};
  auto r = run_ok(o);
  if (r.filesystem_isolation != "readonly_root") {
    KILN_SKIP("mount namespaces are not permitted here: only RLIMIT_FSIZE limits writes");
  }
  CHECK(r.exit_code == 1);
  CHECK(r.stdout_text == "open: Read-only file system\n");
  CHECK_FALSE(kiln::read_file(outside.path() + "/planted").is_ok());

  o.argv = {KILN_SANDBOX_PROBE, "write", scratch.path() + "/inside"};
  CHECK(run_ok(o).exit_code == 0);
  CHECK(kiln::read_file(scratch.path() + "/inside").is_ok());

  auto devices = shell("echo discarded > /dev/null && echo ok");  // device nodes stay usable
  devices.readonly_root = true;
  devices.working_dir = scratch.path();
  CHECK(run_ok(devices).stdout_text == "ok\n");

  // A private writable /dev/shm: runtimes need one, and nothing written there reaches the host's.
  const std::string shm_name = "/dev/shm/kiln-sandbox-test-" + std::to_string(getpid());
  o.argv = {KILN_SANDBOX_PROBE, "write", shm_name};
  CHECK(run_ok(o).exit_code == 0);
  CHECK_FALSE(kiln::read_file(shm_name).is_ok());

  o.argv = {KILN_SANDBOX_PROBE, "remount"};  // root without capabilities cannot undo it
  auto remount = run_ok(o);
  CHECK(remount.exit_code == 1);

  SECTION("without the option the same write goes through (the test can fail)") {
    o.readonly_root = false;
    o.argv = {KILN_SANDBOX_PROBE, "write", outside.path() + "/planted"};
    CHECK(run_ok(o).exit_code == 0);
  }
}

TEST_CASE("the child cannot signal the tester, its supervisor or everyone", "[sandbox]") {
  SandboxOptions o;
  o.argv = {KILN_SANDBOX_PROBE, "kill", std::to_string(getpid())};
  for (bool pidns : {true, false}) {
    o.isolate_pids = pidns;
    auto r = run_ok(o);
    INFO(r.stdout_text);
    CHECK(r.exit_code == 0);
  }
}

TEST_CASE("a background job holding the output pipes does not stall the run", "[sandbox]") {
  auto r = run_ok(shell("sleep 100 & echo started"));
  CHECK(r.exit_code == 0);
  CHECK(r.stdout_text == "started\n");
  CHECK(r.wall_s < 5);
}

TEST_CASE("a flood of output is capped with a marker", "[sandbox]") {
  auto o = shell("head -c 5000000 /dev/zero | tr '\\0' 'a'; echo; echo the-end");
  o.max_output_bytes = 4096;
  auto r = run_ok(o);
  CHECK(r.exit_code == 0);
  CHECK(r.stdout_text.size() < 4096 + 64);
  CHECK(r.stdout_text.find("bytes dropped]") != std::string::npos);
  CHECK(r.stdout_text.rfind("the-end\n") == r.stdout_text.size() - 8);  // the tail is kept
  CHECK(r.stdout_text.rfind("aaaa", 0) == 0);                           // and so is the head
}

TEST_CASE("the environment is exactly what is passed", "[sandbox]") {
  ::setenv("KILN_SANDBOX_TEST_SECRET", "hunter2", 1);
  SandboxOptions o;
  o.argv = {"/usr/bin/env"};
  o.env = {"ONLY=this"};
  auto r = run_ok(o);
  CHECK(r.exit_code == 0);
  CHECK(r.stdout_text == "ONLY=this\n");
  ::unsetenv("KILN_SANDBOX_TEST_SECRET");
}

TEST_CASE("the child runs in its working directory, pinned to the given cores", "[sandbox]") {
  kiln::TempDir dir("kiln-sandbox-test");
  auto o = shell("pwd; grep Cpus_allowed_list /proc/self/status");
  o.working_dir = dir.path();
  o.cpu_affinity = {0};
  auto r = run_ok(o);
  CHECK(r.exit_code == 0);
  CHECK(r.stdout_text.find(dir.path() + "\n") == 0);
  CHECK(r.stdout_text.find("Cpus_allowed_list:\t0\n") != std::string::npos);
}

TEST_CASE("the network is unreachable from inside", "[sandbox]") {
  kiln::testing::LoopbackListener listener;
  REQUIRE(listener.port > 0);
  SandboxOptions o;
  o.argv = {KILN_SANDBOX_PROBE, "connect", std::to_string(listener.port)};

  SECTION("without isolation the probe connects (the test can fail)") {
    o.isolate_network = false;
    auto r = run_ok(o);
    CHECK(r.network_isolation == "none");
    CHECK(r.exit_code == 0);
  }
  SECTION("isolated, by namespace where permitted, else seccomp") {
    auto r = run_ok(o);
    CHECK((r.network_isolation == "netns" || r.network_isolation == "seccomp"));
    CHECK(r.exit_code == 1);
  }
  SECTION("the seccomp fallback refuses internet sockets") {
    o.force_seccomp_network = true;
    auto r = run_ok(o);
    CHECK(r.network_isolation == "seccomp");
    CHECK(r.exit_code == 1);
    CHECK(r.stdout_text == "socket: Operation not permitted\n");
  }
}

TEST_CASE("the file size limit stops a child writing too much", "[sandbox]") {
  kiln::TempDir dir("kiln-sandbox-test");
  SandboxOptions o;
  o.argv = {KILN_SANDBOX_PROBE, "write-file", "10000000"};
  o.working_dir = dir.path();
  o.file_size_bytes = 64 * 1024;
  auto r = run_ok(o);
  CHECK(r.term_signal == SIGXFSZ);
  auto written = kiln::read_file(dir.path() + "/big");
  REQUIRE(written.is_ok());
  CHECK(written->size() <= 64 * 1024);
}

TEST_CASE("core dumps are off and the cpu limit applies", "[sandbox]") {
  auto o = shell("ulimit -c; ulimit -t");
  o.cpu_time_s = 7;
  auto r = run_ok(o);
  CHECK(r.stdout_text == "0\n7\n");
}

TEST_CASE("a program that cannot be started is an error, not a result", "[sandbox]") {
  SandboxOptions o;
  o.argv = {"/nonexistent/program"};
  auto r = run_sandboxed(o);
  CHECK_FALSE(r.is_ok());
  SandboxOptions missing;
  missing.argv = {"no-such-program-kiln"};
  missing.env = kEnv;
  auto r2 = run_sandboxed(missing);
  REQUIRE_FALSE(r2.is_ok());
  CHECK(r2.status().code() == kiln::StatusCode::kNotFound);
}

TEST_CASE("a confined process can signal only itself and cannot start processes", "[sandbox]") {
  // In a forked child: confine, then try everything the evaluation runner must not be able to do.
  const pid_t parent = ::getpid();
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    int failures = 0;
    if (!kiln::sandbox::confine_current_process().is_ok()) _exit(100);
    if (::kill(parent, 0) == 0 || errno != EPERM) failures |= 1;  // the evaluator
    if (::kill(0, 0) == 0 || errno != EPERM) failures |= 2;       // its own process group
    if (::kill(-1, 0) == 0 || errno != EPERM) failures |= 4;      // everything
    if (::kill(::getpid(), 0) != 0) failures |= 8;                // itself: allowed
    pid_t p = ::fork();
    if (p == 0) _exit(0);
    if (p >= 0 || errno != EPERM) failures |= 16;
    std::thread t([] {});  // threads still start
    t.join();
    _exit(failures);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
