// Test helpers: child processes with captured output, free ports, polling.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace kiln::testing {

// The folder holding Kiln's executables (KILN_BIN_DIR, else the build folder).
std::string bin_dir();
std::string source_dir();

struct ProcessResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs to completion (killed after timeout_s) and captures stdout and stderr.
ProcessResult run_process(const std::vector<std::string>& argv, double timeout_s = 120);

// A background process; stdout+stderr go to a file. Killed (SIGTERM, then SIGKILL) on destruction.
class Background {
 public:
  Background(const std::vector<std::string>& argv, const std::string& log_path);
  ~Background();
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  pid_t pid() const { return pid_; }
  // SIGTERM and wait; returns the exit code (or 128+signal).
  int stop(double timeout_s = 30);

 private:
  pid_t pid_ = -1;
};

// A loopback port nothing holds, below the ephemeral range (no connection can take it before it is bound),
// a different one at every call in this process.
int free_tcp_port();
bool eventually(const std::function<bool()>& pred, double timeout_s, double interval_s = 0.05);
std::string http_get(int port, const std::string& path);

}  // namespace kiln::testing
