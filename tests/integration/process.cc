#include "process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <mutex>
#include <cstdlib>
#include <thread>

#include "kiln/core/time.h"

namespace kiln::testing {

std::string bin_dir() {
  const char* env = std::getenv("KILN_BIN_DIR");
  return env ? env : std::string(KILN_BINARY_DIR) + "/bin";
}

std::string source_dir() {
  const char* env = std::getenv("KILN_SOURCE_DIR");
  return env ? env : std::string(KILN_SOURCE_DIR);
}

namespace {
std::vector<char*> c_argv(std::vector<std::string>& argv) {
  std::vector<char*> out;
  for (auto& a : argv) out.push_back(a.data());
  out.push_back(nullptr);
  return out;
}

int decode_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}
}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv_in, double timeout_s) {
  std::vector<std::string> argv = argv_in;
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) return {};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    auto a = c_argv(argv);
    ::execv(a[0], a.data());
    _exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  ProcessResult r;
  double deadline = monotonic_s() + timeout_s;
  bool out_open = true, err_open = true;
  while (out_open || err_open) {
    pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
    int left_ms = static_cast<int>((deadline - monotonic_s()) * 1000);
    if (left_ms <= 0) {
      ::kill(pid, SIGKILL);
      break;
    }
    ::poll(fds, 2, std::min(left_ms, 200));
    char buf[4096];
    for (int i = 0; i < 2; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        (i == 0 ? out_open : err_open) = false;
      } else {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(n));
      }
    }
  }
  ::close(out_pipe[0]);
  ::close(err_pipe[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.exit_code = decode_status(status);
  return r;
}

Background::Background(const std::vector<std::string>& argv_in, const std::string& log_path) {
  std::vector<std::string> argv = argv_in;
  int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  pid_ = ::fork();
  if (pid_ == 0) {
    // If the test process dies (a fatal signal skips destructors), the background process follows.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    auto a = c_argv(argv);
    ::execv(a[0], a.data());
    _exit(127);
  }
  ::close(fd);
}

int Background::stop(double timeout_s) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  double deadline = monotonic_s() + timeout_s;
  int status = 0;
  while (monotonic_s() < deadline) {
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return decode_status(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return 128 + SIGKILL;
}

Background::~Background() { stop(); }

namespace {

// Whether nothing holds `port` on loopback now (bound without SO_REUSEADDR, so a TIME_WAIT counts too).
bool bindable(int port) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(s);
  return ok;
}

// The first port of the kernel's ephemeral range (what connect() and bind(0) draw from).
int ephemeral_low() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  if (range >> low >> high && low > 2048) return low;
  return 32768;
}

}  // namespace

int free_tcp_port() {
  // Not a port the kernel hands out (bind to port 0): until the service binds it, any connection made on
  // this host (the services' own connections to the broker, say) may take it as its local port and hold
  // it for its life, and the service then cannot start. Ports below the ephemeral range are never handed
  // out; each test process walks its own stretch of them (by pid) and skips any that something holds.
  static std::mutex mu;
  static int next = -1;
  std::lock_guard<std::mutex> lock(mu);
  constexpr int kLow = 10000;
  const int span = std::max(1000, ephemeral_low() - kLow);
  if (next < 0) next = static_cast<int>((static_cast<unsigned>(::getpid()) * 64u) % static_cast<unsigned>(span));
  for (int tries = 0; tries < span; ++tries) {
    const int port = kLow + next;
    next = (next + 1) % span;
    if (bindable(port)) return port;
  }
  return 0;
}

bool eventually(const std::function<bool()>& pred, double timeout_s, double interval_s) {
  double deadline = monotonic_s() + timeout_s;
  while (monotonic_s() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
  }
  return pred();
}

std::string http_get(int port, const std::string& path) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_connection_timeout(2);
  cli.set_read_timeout(5);
  auto res = cli.Get(path.c_str());
  if (!res || res->status != 200) return {};
  return res->body;
}

}  // namespace kiln::testing
