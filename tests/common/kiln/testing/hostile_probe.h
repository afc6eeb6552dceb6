// The host code of a hostile candidate: on its first call in a process it tries every attack of the
// threat model's confinement table on Kiln's own files and processes, and prints one line per attack to
// stderr ("KILN-PROBE <name> refused (<why>)" or "KILN-PROBE <name> SUCCEEDED"); then the kernel goes on
// and computes the right answer, so its verdict is otherwise normal. Used by the CPU battery (ctest) and
// the GPU suite, where the same code is the host part of a CUDA candidate. Test-only.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace kiln::testing {

// What the probe attacks: Kiln's files (which must exist, with content, when it runs), a folder it must
// not create files in, a TCP port it must not reach, a process it must not signal and a marker from that
// process's environment it must not find in any /proc/<pid>/environ.
struct ProbeTargets {
  std::string outside_dir;
  std::string registry_file, job_table, archive, config_file, log_file, home_secret;
  int broker_port = 0;
  int tester_pid = 0;
  std::string environ_marker;
};

// The names of the attacks, in the order the probe prints them.
inline const std::vector<std::string>& probe_names() {
  static const std::vector<std::string> names = {"create_outside",
                                                 "write_registry",
                                                 "read_registry",
                                                 "write_job_table",
                                                 "read_job_table",
                                                 "write_archive",
                                                 "read_archive",
                                                 "write_config",
                                                 "read_config",
                                                 "read_log",
                                                 "read_home",
                                                 "read_environ",
                                                 "connect_broker",
                                                 "signal_tester",
                                                 "signal_all",
                                                 "ptrace_init",
                                                 "fork"};
  return names;
}

// C++ for the top of the candidate's source (before kiln_entry): `kiln_hostile_probe()`, to be called at
// the start of kiln_entry.
inline std::string probe_source(const ProbeTargets& t) {
  auto quoted = [](const std::string& s) { return "\"" + s + "\""; };
  // Kiln's files, each opened for writing (where the attack is a write) and for reading, in probe_names' order.
  struct FileAttack {
    const char* name;
    std::string path;
    const char* write_flags;  // nullptr: a read
  };
  const FileAttack files[] = {{"create_outside", t.outside_dir + "/planted", "O_CREAT | O_WRONLY"},
                              {"write_registry", t.registry_file, "O_WRONLY"},
                              {"read_registry", t.registry_file, nullptr},
                              {"write_job_table", t.job_table, "O_WRONLY"},
                              {"read_job_table", t.job_table, nullptr},
                              {"write_archive", t.archive, "O_WRONLY"},
                              {"read_archive", t.archive, nullptr},
                              {"write_config", t.config_file, "O_WRONLY"},
                              {"read_config", t.config_file, nullptr},
                              {"read_log", t.log_file, nullptr},
                              {"read_home", t.home_secret, nullptr}};
  std::string file_attacks;
  for (const FileAttack& f : files) {
    file_attacks += std::string("  kiln_probe_") + (f.write_flags ? "write" : "read") + "(\"" + f.name + "\", " +
                    quoted(f.path) + (f.write_flags ? std::string(", ") + f.write_flags : std::string()) + ");\n";
  }
  return R"(#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
namespace {
void kiln_probe_say(const char* name, bool ok, int err) {
  if (ok) std::fprintf(stderr, "KILN-PROBE %s SUCCEEDED\n", name);
  else std::fprintf(stderr, "KILN-PROBE %s refused (%s)\n", name, err ? std::strerror(err) : "nothing there");
}
void kiln_probe_write(const char* name, const char* path, int flags) {
  int fd = open(path, flags, 0644);
  int err = errno;
  bool ok = fd >= 0 && write(fd, "", 0) >= 0;
  if (fd >= 0) close(fd);
  kiln_probe_say(name, ok, ok ? 0 : err);
}
void kiln_probe_read(const char* name, const char* path) {
  int fd = open(path, O_RDONLY);
  int err = errno;
  char buf[64];
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf) : -1;
  if (fd >= 0) { err = n < 0 ? errno : 0; close(fd); }
  kiln_probe_say(name, n > 0, err);
}
void kiln_hostile_probe() {
  static bool probed = false;
  if (probed) return;
  probed = true;
)" + file_attacks +
         R"(  {
    bool found = false;
    if (DIR* proc = opendir("/proc")) {
      while (dirent* e = readdir(proc)) {
        std::string path = std::string("/proc/") + e->d_name + "/environ";
        int fd = open(path.c_str(), O_RDONLY);
        if (fd < 0) continue;
        std::string env;
        char buf[4096];
        for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) env.append(buf, static_cast<size_t>(n));
        close(fd);
        if (env.find()" +
         quoted(t.environ_marker) + R"() != std::string::npos) found = true;
      }
      closedir(proc);
    }
    kiln_probe_say("read_environ", found, 0);
  }
  {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int err = errno;
    bool ok = false;
    if (fd >= 0) {
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons()" +
         std::to_string(t.broker_port) + R"();
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
      err = errno;
      close(fd);
    }
    kiln_probe_say("connect_broker", ok, ok ? 0 : err);
  }
  // Each call before its errno is read (an argument list's order is unspecified).
  bool done = kill()" +
         std::to_string(t.tester_pid) + R"(, 0) == 0;
  kiln_probe_say("signal_tester", done, errno);
  done = kill(-1, 0) == 0;
  kiln_probe_say("signal_all", done, errno);
  done = ptrace(PTRACE_ATTACH, 1, nullptr, nullptr) == 0;
  kiln_probe_say("ptrace_init", done, errno);
  pid_t child = fork();
  if (child == 0) _exit(0);
  int err = errno;
  if (child > 0) waitpid(child, nullptr, 0);
  kiln_probe_say("fork", child > 0, err);
}
}  // namespace
)";
}

// The probe's lines in `log`, by attack: "refused (...)" or "SUCCEEDED" (the first line of each).
inline std::map<std::string, std::string> probe_results(const std::string& log) {
  std::map<std::string, std::string> out;
  const std::string tag = "KILN-PROBE ";
  for (size_t at = log.find(tag); at != std::string::npos; at = log.find(tag, at + 1)) {
    size_t eol = log.find('\n', at);
    std::string line =
        log.substr(at + tag.size(), eol == std::string::npos ? std::string::npos : eol - at - tag.size());
    size_t space = line.find(' ');
    if (space == std::string::npos) continue;
    out.emplace(line.substr(0, space), line.substr(space + 1));
  }
  return out;
}

}  // namespace kiln::testing
