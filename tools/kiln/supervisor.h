// `kiln up`: every service as a supervised child process. A child that dies is restarted (with backoff)
// and the event logged; stop() terminates workers first and the broker last.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "kiln/core/status.h"

namespace kiln::cli {

struct ChildSpec {
  std::string name;                                      // "compiler-1"
  std::vector<std::string> argv;                         // argv[0] is the executable path
  std::string log_path;                                  // stdout+stderr go here
  std::vector<std::pair<std::string, std::string>> env;  // set in the child on top of ours
  bool is_broker = false;
};

class Supervisor {
 public:
  explicit Supervisor(std::vector<ChildSpec> children) : specs_(std::move(children)) {}
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  Status start();
  // Reaps exited children and restarts them when due. Call often.
  void poll();
  // SIGTERM to workers, then the broker; SIGKILL whatever is left after `grace_s`.
  void stop(double grace_s = 10.0);
  // Sends SIGKILL to the named child (tests use it to show recovery).
  bool kill_child(const std::string& name);
  int restarts() const { return restarts_; }
  pid_t pid_of(const std::string& name) const;

 private:
  struct Child {
    ChildSpec spec;
    pid_t pid = -1;
    double started_at = 0;
    double restart_at = 0;  // monotonic; 0 = not waiting
    double backoff_s = 1.0;
  };
  Status spawn(Child& c);
  std::vector<ChildSpec> specs_;
  std::vector<Child> children_;
  int restarts_ = 0;
  bool stopping_ = false;
};

}  // namespace kiln::cli
