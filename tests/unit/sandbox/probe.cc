// A small program the sandbox tests run as the sandboxed child.
//   probe connect PORT      exit 0 if a TCP connect to 127.0.0.1:PORT works, 1 (with errno) if not
//   probe grandchild FILE   fork a child that writes its pid to FILE and sleeps; the leader exits 0
//   probe write-file N      write N bytes to ./big
//   probe crash             null dereference
//   probe setsid FILE       double-fork a grandchild that calls setsid(), writes its pid to FILE and sleeps
//   probe fork-bomb N [TAG] start a thread, then fork up to N sleeping children; exit 1 when fork is refused
//   probe environ MARKER    print OPENAI_API_KEY as seen; exit 1 if any readable /proc/*/environ has MARKER
//   probe write PATH        create PATH; exit 0 if that worked
//   probe remount           remount / read-write; exit 0 if that worked
//   probe kill PID          signal 0 to -1, PID and the parent; exit 0 if every one was refused
//   probe pid               print getpid()
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <iterator>
#include <thread>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int probe_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    std::printf("socket: %s\n", std::strerror(errno));
    return 1;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::printf("connect: %s\n", std::strerror(errno));
    return 1;
  }
  std::printf("connected\n");
  close(fd);
  return 0;
}

int probe_grandchild(const char* file) {
  pid_t pid = fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    FILE* f = std::fopen(file, "w");
    if (f) {
      std::fprintf(f, "%d\n", static_cast<int>(getpid()));
      std::fclose(f);
    }
    for (;;) pause();
  }
  // Give the grandchild time to write its pid before the leader leaves.
  for (int i = 0; i < 200 && access(file, F_OK) != 0; ++i) usleep(5000);
  usleep(20000);
  return 0;
}

int probe_write_file(long n) {
  FILE* f = std::fopen("big", "w");
  if (!f) return 2;
  std::vector<char> chunk(4096, 'x');
  for (long written = 0; written < n; written += static_cast<long>(chunk.size())) {
    if (std::fwrite(chunk.data(), 1, chunk.size(), f) != chunk.size()) return 3;
  }
  return std::fclose(f) == 0 ? 0 : 3;
}

void wait_for_file(const char* file) {
  for (int i = 0; i < 400 && access(file, F_OK) != 0; ++i) usleep(5000);
  usleep(20000);
}

int probe_setsid(const char* file) {
  pid_t pid = fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    setsid();
    if (fork() != 0) _exit(0);  // the grandchild is orphaned, in its own session and group
    FILE* f = std::fopen(file, "w");
    if (f) {
      std::fprintf(f, "%d\n", static_cast<int>(getpid()));
      std::fclose(f);
    }
    for (;;) pause();
  }
  waitpid(pid, nullptr, 0);
  wait_for_file(file);
  return 0;
}

int probe_fork_bomb(int n) {
  bool thread_ran = false;
  std::thread t([&] { thread_ran = true; });
  t.join();
  std::printf("thread: %s\n", thread_ran ? "ok" : "failed");
  for (int i = 0; i < n; ++i) {
    pid_t pid = fork();
    if (pid < 0) {
      std::printf("fork: %s\n", std::strerror(errno));
      std::fflush(stdout);
      if (i == 0) return 1;
      break;
    }
    if (pid == 0) {
      for (;;) pause();
    }
  }
  std::printf("forked\n");
  std::fflush(stdout);
  for (;;) pause();
}

int probe_environ(const std::string& marker) {
  const char* key = std::getenv("OPENAI_API_KEY");
  std::printf("OPENAI_API_KEY=%s\n", key ? key : "(unset)");
  int found = 0;
  DIR* proc = opendir("/proc");
  if (!proc) return 2;
  const std::string self = std::to_string(getpid());
  while (dirent* e = readdir(proc)) {
    std::string name = e->d_name;
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos || name == self) continue;
    std::ifstream in("/proc/" + name + "/environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (env.find(marker) != std::string::npos) {
      std::printf("found in %s\n", name.c_str());
      ++found;
    }
  }
  closedir(proc);
  return found > 0 ? 1 : 0;
}

int probe_write(const char* path) {
  int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
  if (fd < 0) {
    std::printf("open: %s\n", std::strerror(errno));
    return 1;
  }
  close(fd);
  return 0;
}

int probe_remount() {
  if (mount(nullptr, "/", nullptr, MS_REMOUNT | MS_BIND, nullptr) != 0) {
    std::printf("mount: %s\n", std::strerror(errno));
    return 1;
  }
  return 0;
}

int probe_kill(pid_t target) {
  int refused = 0;
  for (pid_t pid : {static_cast<pid_t>(-1), target, getppid()}) {
    if (kill(pid, 0) != 0) {
      std::printf("kill(%d): %s\n", static_cast<int>(pid), std::strerror(errno));
      ++refused;
    } else {
      std::printf("kill(%d): allowed\n", static_cast<int>(pid));
    }
  }
  return refused == 3 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 64;
  std::string mode = argv[1];
  if (mode == "connect" && argc == 3) return probe_connect(std::atoi(argv[2]));
  if (mode == "grandchild" && argc == 3) return probe_grandchild(argv[2]);
  if (mode == "write-file" && argc == 3) return probe_write_file(std::atol(argv[2]));
  if (mode == "setsid" && argc == 3) return probe_setsid(argv[2]);
  if (mode == "fork-bomb" && argc >= 3) return probe_fork_bomb(std::atoi(argv[2]));
  if (mode == "environ" && argc == 3) return probe_environ(argv[2]);
  if (mode == "write" && argc == 3) return probe_write(argv[2]);
  if (mode == "remount") return probe_remount();
  if (mode == "kill" && argc == 3) return probe_kill(static_cast<pid_t>(std::atoi(argv[2])));
  if (mode == "pid") {
    std::printf("%d\n", static_cast<int>(getpid()));
    return 0;
  }
  if (mode == "crash") {
    volatile int* p = nullptr;
    return *p;
  }
  return 64;
}
