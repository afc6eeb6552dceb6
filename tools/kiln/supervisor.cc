#include "supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "kiln/core/time.h"

namespace kiln::cli {

namespace {
constexpr double kMaxBackoffS = 30.0;
constexpr double kHealthyAfterS = 60.0;  // a child up this long gets its backoff reset

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by ") + strsignal(WTERMSIG(status));
  return "stopped";
}
}  // namespace

Supervisor::~Supervisor() { stop(5.0); }

Status Supervisor::spawn(Child& c) {
  std::vector<char*> argv;
  for (auto& a : c.spec.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  int log_fd = ::open(c.spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return unavailable(c.spec.log_path + ": " + std::strerror(errno));
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    return unavailable(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // Own process group, so a terminal's Ctrl-C reaches only the supervisor, which stops children in order.
    ::setpgid(0, 0);
    // If the supervisor dies, its children follow.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) _exit(0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    for (const auto& [k, v] : c.spec.env) ::setenv(k.c_str(), v.c_str(), 1);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::execv(argv[0], argv.data());
    std::fprintf(stderr, "exec %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  ::close(log_fd);
  c.pid = pid;
  c.started_at = monotonic_s();
  c.restart_at = 0;
  return Status::ok();
}

Status Supervisor::start() {
  // The broker first, so workers find it at once (they would reconnect anyway).
  std::stable_sort(specs_.begin(), specs_.end(),
                   [](const ChildSpec& a, const ChildSpec& b) { return a.is_broker > b.is_broker; });
  for (auto& s : specs_) {
    children_.push_back(Child{s});
    KILN_RETURN_IF_ERROR(spawn(children_.back()).with_context("starting " + s.name));
    if (s.is_broker) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return Status::ok();
}

void Supervisor::poll() {
  for (auto& c : children_) {
    if (c.pid > 0) {
      int status = 0;
      pid_t r = ::waitpid(c.pid, &status, WNOHANG);
      if (r == c.pid) {
        double up = monotonic_s() - c.started_at;
        c.pid = -1;
        if (stopping_) continue;
        if (up > kHealthyAfterS) c.backoff_s = 1.0;
        spdlog::warn("service {} {} after {:.1f} s; restarting in {:.0f} s (log: {})", c.spec.name,
                     describe_exit(status), up, c.backoff_s, c.spec.log_path);
        c.restart_at = monotonic_s() + c.backoff_s;
        c.backoff_s = std::min(c.backoff_s * 2, kMaxBackoffS);
      }
    } else if (!stopping_ && c.restart_at > 0 && monotonic_s() >= c.restart_at) {
      Status st = spawn(c);
      if (st.is_ok()) {
        ++restarts_;
        spdlog::info("service {} restarted (pid {})", c.spec.name, c.pid);
      } else {
        spdlog::error("restarting {}: {}", c.spec.name, st.message());
        c.restart_at = monotonic_s() + c.backoff_s;
      }
    }
  }
}

void Supervisor::stop(double grace_s) {
  if (stopping_ && children_.empty()) return;
  stopping_ = true;
  auto term_and_wait = [&](bool brokers) {
    for (auto& c : children_)
      if (c.pid > 0 && c.spec.is_broker == brokers) ::kill(c.pid, SIGTERM);
    double until = monotonic_s() + grace_s;
    while (monotonic_s() < until) {
      bool alive = false;
      for (auto& c : children_) {
        if (c.pid <= 0 || c.spec.is_broker != brokers) continue;
        int status = 0;
        if (::waitpid(c.pid, &status, WNOHANG) == c.pid)
          c.pid = -1;
        else
          alive = true;
      }
      if (!alive) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (auto& c : children_) {
      if (c.pid > 0 && c.spec.is_broker == brokers) {
        spdlog::warn("service {} did not stop within {:.0f} s: killed", c.spec.name, grace_s);
        ::kill(-c.pid, SIGKILL);
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, nullptr, 0);
        c.pid = -1;
      }
    }
  };
  term_and_wait(false);
  term_and_wait(true);
  children_.clear();
}

bool Supervisor::kill_child(const std::string& name) {
  for (auto& c : children_)
    if (c.spec.name == name && c.pid > 0) return ::kill(c.pid, SIGKILL) == 0;
  return false;
}

pid_t Supervisor::pid_of(const std::string& name) const {
  for (const auto& c : children_)
    if (c.spec.name == name) return c.pid;
  return -1;
}

}  // namespace kiln::cli
