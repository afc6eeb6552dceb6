// Candidate code for the battery with a PyTorch reference (torch_cheats_test.cc): the attacks on the
// reference runner, as source text that goes above kiln_entry (kernel_source's `globals`). Each attack
// prints one line on stderr, "kiln-probe WHAT: GOT" or "kiln-probe WHAT: refused (REASON)", which the
// tests read back from kiln-eval's stderr. Test-only.
#pragma once

namespace kiln::trust {

// Includes and the helpers every probe uses: note() prints an outcome (and returns whether it got
// through), reference_pid() finds the reference runner (a sibling of this runner, forked from the same
// evaluator, whose argv[0] names python), read_all() reads a file with open/read so that errno says why
// it could not.
inline constexpr const char* kProbeCommon = R"SRC(#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

static bool note(const std::string& what, bool got, int err) {
  if (got) std::fprintf(stderr, "kiln-probe %s: GOT\n", what.c_str());
  else std::fprintf(stderr, "kiln-probe %s: refused (%s)\n", what.c_str(), std::strerror(err));
  std::fflush(stderr);
  return got;
}

static int read_all(const std::string& path, std::string& out) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return errno;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  const int err = errno;
  close(fd);
  return out.empty() ? (err ? err : EIO) : 0;
}

static int reference_pid() {
  int found = -1;
  if (DIR* proc = opendir("/proc")) {
    while (dirent* e = readdir(proc)) {
      const int pid = std::atoi(e->d_name);
      if (pid <= 0 || pid == getpid()) continue;
      std::string stat, cmdline;
      if (read_all(std::string("/proc/") + e->d_name + "/stat", stat) != 0) continue;
      const size_t close_paren = stat.rfind(')');
      if (close_paren == std::string::npos) continue;
      int ppid = -1;
      if (std::sscanf(stat.c_str() + close_paren + 1, " %*c %d", &ppid) != 1 || ppid != getppid()) continue;
      if (read_all(std::string("/proc/") + e->d_name + "/cmdline", cmdline) != 0) continue;
      if (std::string(cmdline.c_str()).find("python") != std::string::npos) found = pid;
    }
    closedir(proc);
  }
  return found;
}

// Where the mapping that holds `p` starts in `maps` (a /proc/<pid>/maps text), 0 if none does.
static uintptr_t mapping_start(const std::string& maps, uintptr_t p) {
  for (size_t at = 0; at < maps.size();) {
    const size_t eol = maps.find('\n', at);
    const std::string line = maps.substr(at, eol == std::string::npos ? std::string::npos : eol - at);
    at = eol == std::string::npos ? maps.size() : eol + 1;
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && p >= lo && p < hi) return lo;
  }
  return 0;
}
)SRC";

// Reads the reference's outputs out of the reference runner, and out of the evaluator (which maps every
// runner's arena): a process's memory map (to find the arena), its open files (where the arena is
// a memfd), /proc/<pid>/mem, process_vm_readv, ptrace, pidfd_getfd, map_files and its environment:
// 9 attempts on each. What it gets lands in `y`; nothing it gets, nothing written. The attempts are printed
// on the first call only. This runner's output lies at the same offset of its own arena as the
// reference's in the reference's: the arenas have one layout.
inline constexpr const char* kReachIn = R"SRC(
static bool steal_from(int pid, const char* who, void* y, size_t bytes, bool print) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::string own;
  read_all("/proc/self/maps", own);
  const uintptr_t own_base = mapping_start(own, reinterpret_cast<uintptr_t>(y));
  const uintptr_t off = reinterpret_cast<uintptr_t>(y) - own_base;
  uintptr_t base = own_base;  // a guess at the reference arena's address where its map is closed
  bool got = false;
  auto outcome = [&](const char* what, bool ok, int err) {
    got = got || ok;
    if (print) note(std::string(who) + ": " + what, ok, err);
  };

  std::string maps;
  int err = read_all(proc + "/maps", maps);
  outcome("its /proc/<pid>/maps", err == 0, err);
  if (err == 0) {
    const size_t at = maps.find("kiln-arena");
    if (at != std::string::npos) base = mapping_start(maps, std::strtoul(maps.c_str() + maps.rfind('\n', at) + 1, nullptr, 16));
  }
  std::string environ;
  err = read_all(proc + "/environ", environ);
  outcome("its /proc/<pid>/environ", err == 0, err);

  // Its open files (listing them is allowed; opening one is what counts): where the arena is still open
  // (a memfd), mapped here it is the reference's arena.
  int fd = -1, opened_fds = 0, fd_err = 0;
  DIR* fds = opendir((proc + "/fd").c_str());
  if (!fds) fd_err = errno;
  while (dirent* e = fds ? readdir(fds) : nullptr) {
    if (e->d_name[0] == '.') continue;
    if ((fd = openat(dirfd(fds), e->d_name, O_RDONLY)) < 0) {
      fd_err = errno;
      continue;
    }
    ++opened_fds;
    struct stat st{};
    void* m = fstat(fd, &st) == 0 && st.st_size > 0 ? mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (m != MAP_FAILED && off + bytes <= static_cast<size_t>(st.st_size)) std::memcpy(y, static_cast<char*>(m) + off, bytes);
    close(fd);
  }
  if (fds) closedir(fds);
  outcome("a file it has open (/proc/<pid>/fd/N)", opened_fds > 0, fd_err ? fd_err : ENOENT);
  fd = open((proc + "/mem").c_str(), O_RDONLY);
  outcome("its /proc/<pid>/mem", fd >= 0, errno);
  if (fd >= 0) {
    (void)pread(fd, y, bytes, static_cast<off_t>(base + off));
    close(fd);
  }
  iovec local{y, bytes}, remote{reinterpret_cast<void*>(base + off), bytes};
  const ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
  outcome("process_vm_readv of it", n >= 0 || errno == EFAULT, errno);
  long r = ptrace(PTRACE_SEIZE, pid, nullptr, nullptr);
  outcome("ptrace(PTRACE_SEIZE) of it", r == 0, errno);
  r = ptrace(PTRACE_ATTACH, pid, nullptr, nullptr);
  outcome("ptrace(PTRACE_ATTACH) of it", r == 0, errno);
  const int pidfd = static_cast<int>(syscall(434 /* pidfd_open */, pid, 0));
  outcome("pidfd_open of it", pidfd >= 0, errno);
  if (pidfd >= 0) {
    const int dup = static_cast<int>(syscall(438 /* pidfd_getfd */, pidfd, 3, 0));
    outcome("pidfd_getfd of its arena", dup >= 0, errno);
  }
  DIR* files = opendir((proc + "/map_files").c_str());
  int opened = -1, map_err = files ? EACCES : errno;
  if (files) {
    while (dirent* e = readdir(files)) {
      if (e->d_name[0] == '.') continue;
      opened = open((proc + "/map_files/" + e->d_name).c_str(), O_RDONLY);
      if (opened >= 0) break;
      map_err = errno;
    }
    closedir(files);
  }
  outcome("a file of its /proc/<pid>/map_files", opened >= 0, map_err);
  return got;
}

static bool steal(void* y, size_t bytes, bool print) {
  const int pid = reference_pid();
  if (print) std::fprintf(stderr, "kiln-probe reference runner: %d\n", pid);
  if (pid <= 0) return false;
  const bool from_reference = steal_from(pid, "reference runner", y, bytes, print);
  return steal_from(getppid(), "evaluator", y, bytes, print) || from_reference;
}
)SRC";

// Signals the reference runner every way there is: stopped (to slow the reference's timed calls, or to
// hang the evaluation), killed (to end it before it is compared). Printed on the first call only.
inline constexpr const char* kSignals = R"SRC(
static void attempt(const char* what, long rc) {
  const int err = errno;  // read here: the call ran before this function was entered
  note(what, rc == 0, err);
}

static void signal_reference() {
  const int pid = reference_pid();
  std::fprintf(stderr, "kiln-probe reference runner: %d\n", pid);
  if (pid <= 0) return;
  attempt("kill(SIGSTOP) of it", kill(pid, SIGSTOP));
  attempt("kill(SIGKILL) of it", kill(pid, SIGKILL));
  attempt("tgkill(SIGKILL) of it", syscall(SYS_tgkill, pid, pid, SIGKILL));
  siginfo_t info{};
  info.si_code = SI_QUEUE;
  attempt("rt_sigqueueinfo(SIGKILL) of it", syscall(SYS_rt_sigqueueinfo, pid, SIGKILL, &info));
  const int pidfd = static_cast<int>(syscall(434 /* pidfd_open */, pid, 0));
  note("pidfd_open of it", pidfd >= 0, errno);
  if (pidfd >= 0) attempt("pidfd_send_signal(SIGKILL) of it", syscall(424, pidfd, SIGKILL, nullptr, 0));
  attempt("kill(SIGKILL) of its process group", kill(-getpgid(pid), SIGKILL));
}
)SRC";

// Looks for another runner's arena in this runner's own address space (a shared mapping other than its
// own) and serves the reference's output from it when the reference's inputs there are this call's:
// the reference and the candidate get the same inputs in a round, and whoever runs second could copy.
// Computes honestly otherwise. Prints, once per process, how many other arenas it saw.
inline constexpr const char* kArenaInSelf = R"SRC(
static int stolen = 0;
static bool from_other_arena(const kiln_args* a, float* y, int64_t n) {
  std::string maps;
  read_all("/proc/self/maps", maps);
  const uintptr_t own = mapping_start(maps, reinterpret_cast<uintptr_t>(a));
  const uintptr_t in_off = reinterpret_cast<uintptr_t>(a->inputs) - own;
  const uintptr_t out_off = reinterpret_cast<uintptr_t>(a->outputs) - own;
  int others = 0;
  bool copied = false;
  for (size_t at = 0; at < maps.size();) {
    const size_t eol = maps.find('\n', at);
    const std::string line = maps.substr(at, eol - at);
    at = eol == std::string::npos ? maps.size() : eol + 1;
    unsigned long lo = 0, hi = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s", &lo, &hi, perms) != 3 || perms[3] != 's' || perms[0] != 'r') continue;
    if (lo == own || out_off + sizeof(kiln_tensor) > hi - lo || in_off + 2 * sizeof(kiln_tensor) > hi - lo) continue;
    ++others;
    const auto* ri = reinterpret_cast<const kiln_tensor*>(lo + in_off);
    const auto* ro = reinterpret_cast<const kiln_tensor*>(lo + out_off);
    auto inside = [&](const void* p) { return reinterpret_cast<uintptr_t>(p) >= lo && reinterpret_cast<uintptr_t>(p) + n * 4 <= hi; };
    if (copied || ro->ndim != 1 || ro->shape[0] != n || !inside(ro->data) || !inside(ri[0].data) || !inside(ri[1].data)) continue;
    if (std::memcmp(ri[0].data, a->inputs[0].data, n * 4) != 0 || std::memcmp(ri[1].data, a->inputs[1].data, n * 4) != 0) continue;
    std::memcpy(y, ro->data, n * 4);
    copied = true;
    ++stolen;
  }
  static bool printed = false;
  if (!printed) {
    printed = true;
    std::fprintf(stderr, "kiln-probe runner %d: %d other arenas mapped here\n", getpid(), others);
  }
  if (copied && stolen <= 3) std::fprintf(stderr, "kiln-probe runner %d: served a call from another arena\n", getpid());
  return copied;
}
)SRC";

}  // namespace kiln::trust
