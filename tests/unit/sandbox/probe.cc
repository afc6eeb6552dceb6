// A small program the sandbox tests run as the sandboxed child.
//   probe connect PORT      exit 0 if a TCP connect to 127.0.0.1:PORT works, 1 (with errno) if not
//   probe grandchild FILE   fork a child that writes its pid to FILE and sleeps; the leader exits 0
//   probe write-file N      write N bytes to ./big
//   probe crash             null dereference
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 64;
  std::string mode = argv[1];
  if (mode == "connect" && argc == 3) return probe_connect(std::atoi(argv[2]));
  if (mode == "grandchild" && argc == 3) return probe_grandchild(argv[2]);
  if (mode == "write-file" && argc == 3) return probe_write_file(std::atol(argv[2]));
  if (mode == "crash") {
    volatile int* p = nullptr;
    return *p;
  }
  return 64;
}
