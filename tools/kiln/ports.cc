#include "ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kiln::cli {

namespace fs = std::filesystem;

namespace {

constexpr const char* kAnyHost = "0.0.0.0";  // where every service's /metrics listens
constexpr const char* kTcpListen = "0A";     // st of a listening socket in /proc/net/tcp

// "tcp://127.0.0.1:5555" -> {"127.0.0.1", 5555}; "tcp://*:5555" -> {"0.0.0.0", 5555}; port 0 for anything
// else (ipc://, a host name): nothing to check.
ServicePort tcp_port(const std::string& endpoint, const std::string& what) {
  const std::string scheme = "tcp://";
  ServicePort p{"", 0, what};
  const size_t colon = endpoint.rfind(':');
  if (endpoint.rfind(scheme, 0) != 0 || colon == std::string::npos || colon < scheme.size()) return p;
  p.host = endpoint.substr(scheme.size(), colon - scheme.size());
  if (p.host == "*") p.host = kAnyHost;
  in_addr addr{};
  if (::inet_pton(AF_INET, p.host.c_str(), &addr) != 1) return p;
  try {
    p.port = std::stoi(endpoint.substr(colon + 1));
  } catch (const std::exception&) {
    p.port = 0;  // the broker itself says what is wrong with it
  }
  return p;
}

// Whether binding host:port fails with "address in use". SO_REUSEADDR, as the services set it, so a
// socket of a Kiln stopped a moment ago (TIME_WAIT) does not count.
bool in_use(const ServicePort& p) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int yes = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(p.port));
  ::inet_pton(AF_INET, p.host.c_str(), &addr.sin_addr);
  const bool busy = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno == EADDRINUSE;
  ::close(fd);
  return busy;
}

// The socket inode listening on `port`, from /proc/net/tcp and tcp6 ("" if none).
std::string listening_inode(int port) {
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream row(line);
      std::string slot, local, remote, state, queues, timer, retrans, uid, timeout, inode;
      row >> slot >> local >> remote >> state >> queues >> timer >> retrans >> uid >> timeout >> inode;
      const size_t colon = local.rfind(':');
      if (state != kTcpListen || colon == std::string::npos) continue;
      if (std::stoi(local.substr(colon + 1), nullptr, 16) == port) return inode;
    }
  }
  return "";
}

}  // namespace

std::vector<ServicePort> ports_of(const config::KilnConfig& c) {
  std::vector<ServicePort> ports{tcp_port(c.broker.bind, "broker.bind"),
                                 tcp_port(c.broker.events_bind, "broker.events_bind")};
  if (!c.broker.external_bind.empty()) ports.push_back(tcp_port(c.broker.external_bind, "broker.external_bind"));
  auto metrics = [&](int port, const std::string& service) {
    ports.push_back(ServicePort{kAnyHost, port, service + " metrics"});
  };
  metrics(c.broker.metrics_port, "broker");
  metrics(c.ingest.metrics_port, "task-ingest");
  metrics(c.llm_bridge.metrics_port, "llm-bridge");
  for (int i = 0; i < c.up.compilers; ++i)
    metrics(replica_port(c.compiler.metrics_port, i), "compiler-" + std::to_string(i + 1));
  for (int i = 0; i < c.up.testers; ++i)
    metrics(replica_port(c.tester.metrics_port, i), "tester-" + std::to_string(i + 1));
  metrics(c.scorer.metrics_port, "scorer");
  metrics(c.promoter.metrics_port, "promoter");
  std::erase_if(ports, [](const ServicePort& p) { return p.port <= 0; });
  return ports;
}

std::string listener_of(int port) {
  const std::string inode = listening_inode(port);
  if (inode.empty() || inode == "0") return "";
  const std::string target = "socket:[" + inode + "]";
  std::error_code ec;
  for (const auto& proc : fs::directory_iterator("/proc", ec)) {
    const std::string pid = proc.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code fd_ec;
    for (const auto& fd : fs::directory_iterator(proc.path() / "fd", fd_ec)) {
      std::error_code link_ec;
      if (fs::read_symlink(fd.path(), link_ec).string() != target) continue;
      std::string name;
      std::getline(std::ifstream(proc.path() / "comm"), name);
      return (name.empty() ? std::string("a process") : name) + " (pid " + pid + ")";
    }
  }
  return "";
}

Status check_ports_free(const std::vector<ServicePort>& ports) {
  for (const auto& p : ports) {
    if (!in_use(p)) continue;
    const std::string who = listener_of(p.port);
    return failed_precondition("port " + std::to_string(p.port) + " (" + p.what + ") is in use" +
                               (who.empty() ? std::string() : " by " + who) +
                               ": is another Kiln running? Stop it, or give this one other ports with --config");
  }
  return Status::ok();
}

}  // namespace kiln::cli
