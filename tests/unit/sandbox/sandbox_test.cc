#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "kiln/core/files.h"
#include "kiln/sandbox/sandbox.h"

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

// A TCP listener on 127.0.0.1 with a kernel-chosen port.
struct Listener {
  int fd = -1;
  int port = 0;
  Listener() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    listen(fd, 4);
    socklen_t len = sizeof addr;
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
  }
  ~Listener() { close(fd); }
};

}  // namespace

TEST_CASE("exit code and output are captured", "[sandbox]") {
  auto r = run_ok(shell("echo out; echo err >&2; exit 7"));
  CHECK(r.exit_code == 7);
  CHECK(r.term_signal == 0);
  CHECK_FALSE(r.timed_out);
  CHECK(r.stdout_text == "out\n");
  CHECK(r.stderr_text == "err\n");
  CHECK(r.describe(10) == "exit code 7");
}

TEST_CASE("a crash is reported by signal", "[sandbox]") {
  SandboxOptions o;
  o.argv = {KILN_SANDBOX_PROBE, "crash"};
  auto r = run_ok(o);
  CHECK(r.term_signal == SIGSEGV);
  CHECK(r.describe(10) == "killed by SIGSEGV");
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
}

TEST_CASE("the whole process group dies with the leader", "[sandbox]") {
  kiln::TempDir dir("kiln-sandbox-test");
  SandboxOptions o;
  o.argv = {KILN_SANDBOX_PROBE, "grandchild", "pid"};
  o.working_dir = dir.path();
  auto r = run_ok(o);
  CHECK(r.exit_code == 0);
  auto pid_text = kiln::read_file(dir.path() + "/pid");
  REQUIRE(pid_text.is_ok());
  pid_t grandchild = std::stoi(*pid_text);
  REQUIRE(grandchild > 0);
  bool alive = true;
  for (int i = 0; i < 200 && alive; ++i) {
    alive = process_alive(grandchild);
    if (alive) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK_FALSE(alive);
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
  CHECK(r.stdout_text.rfind("aaaa", 0) == 0);                         // and so is the head
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
  Listener listener;
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
