#include "kiln/metrics/metrics.h"

#include <httplib.h>
#include <sys/socket.h>
#include <prometheus/text_serializer.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "kiln/core/time.h"

namespace kiln::metrics {

namespace {
// Scrapes are rare and tiny: two handler threads are plenty, and one request per connection keeps
// shutdown prompt (no keep-alive connection holds a worker thread when the server stops).
constexpr size_t kHandlerThreads = 2;
constexpr double kStartTimeoutS = 5.0;

// A byte of a refused name for an error line: 'c' when printable ASCII, else its hex value.
std::string describe_byte(char c) {
  auto b = static_cast<unsigned char>(c);
  if (b > 0x20 && b < 0x7f) return std::string("'") + c + "'";
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", b);
  return std::string("byte ") + hex;
}
}  // namespace

struct MetricsServer::Impl {
  std::shared_ptr<prometheus::Registry> registry;
  std::string node;
  httplib::Server server;
  std::thread thread;
  std::atomic<bool> listen_returned{false};
  int port = 0;
};

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(std::shared_ptr<prometheus::Registry> registry,
                                                            const std::string& host, int port,
                                                            const std::vector<Page>& pages) {
  if (!registry) return invalid_argument("metrics: no registry");
  if (port < 0 || port > 65535) return invalid_argument("metrics: port " + std::to_string(port) + " out of range");
  std::unique_ptr<MetricsServer> self(new MetricsServer());
  self->impl_ = std::make_unique<Impl>();
  Impl& impl = *self->impl_;
  impl.registry = std::move(registry);
  impl.server.new_task_queue = [] { return new httplib::ThreadPool(kHandlerThreads); };
  impl.server.set_keep_alive_max_count(1);
  // httplib's default adds SO_REUSEPORT, which would let a second process share the port and steal half
  // the scrapes; SO_REUSEADDR alone still allows a quick restart.
  impl.server.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  impl.node = node_from_env();
  auto* reg = impl.registry.get();
  const std::string* node = &impl.node;
  impl.server.Get("/metrics", [reg, node](const httplib::Request&, httplib::Response& res) {
    res.set_content(render(*reg, *node), kContentType);
  });
  for (const Page& page : pages) {
    impl.server.Get(page.pattern, [page](const httplib::Request& req, httplib::Response& res) {
      std::vector<std::string> captures;
      for (size_t i = 1; i < req.matches.size(); ++i) captures.push_back(req.matches[i].str());
      Result<std::string> body = page.render ? page.render(captures) : not_found("no page");
      if (body.is_ok()) {
        res.set_content(std::move(body).value(), page.content_type);
      } else {
        res.status = body.status().code() == StatusCode::kNotFound ? 404 : 500;
        res.set_content(body.status().message() + "\n", "text/plain; charset=utf-8");
      }
    });
  }

  if (port == 0) {
    impl.port = impl.server.bind_to_any_port(host);
    if (impl.port <= 0) return unavailable("metrics: cannot bind any port on " + host);
  } else {
    if (!impl.server.bind_to_port(host, port))
      return unavailable("metrics: cannot bind " + host + ":" + std::to_string(port) + " (in use?)");
    impl.port = port;
  }
  impl.thread = std::thread([&impl] {
    impl.server.listen_after_bind();
    impl.listen_returned = true;
  });
  // stop() is only effective once the accept loop runs, so do not hand the server out before then.
  double deadline = monotonic_s() + kStartTimeoutS;
  while (!impl.server.is_running()) {
    if (monotonic_s() > deadline) return internal_error("metrics: server did not start");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return self;
}

MetricsServer::~MetricsServer() {
  if (!impl_) return;
  if (impl_->thread.joinable()) {
    // stop() does nothing before the accept loop has started, so keep asking until the loop has ended.
    while (!impl_->listen_returned) {
      impl_->server.stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    impl_->thread.join();
  }
}

int MetricsServer::port() const { return impl_ ? impl_->port : 0; }

Result<std::string> valid_node(std::string_view value) {
  if (value.empty()) return invalid_argument(std::string(kNodeEnv) + ": empty node name");
  if (value.size() > kMaxNodeLength)
    return invalid_argument(std::string(kNodeEnv) + ": node name of " + std::to_string(value.size()) +
                            " characters (at most " + std::to_string(kMaxNodeLength) + ")");
  auto allowed = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
  };
  auto bad = std::find_if_not(value.begin(), value.end(), allowed);
  if (bad != value.end())
    return invalid_argument(std::string(kNodeEnv) + ": node name has " + describe_byte(*bad) + " at offset " +
                            std::to_string(bad - value.begin()) + " (allowed: letters, digits, '.', '_', '-')");
  return std::string(value);
}

std::string node_from_env() {
  const char* value = std::getenv(kNodeEnv);
  if (value == nullptr || *value == '\0') return "";
  auto node = valid_node(value);
  if (!node.is_ok()) {
    spdlog::warn("{}; series carry no node label", node.status().message());
    return "";
  }
  return std::move(node).value();
}

std::string render(prometheus::Registry& registry, const std::string& node) {
  std::vector<prometheus::MetricFamily> families = registry.Collect();
  if (!node.empty()) {
    for (auto& family : families) {
      for (auto& metric : family.metric) {
        auto& labels = metric.label;
        bool own = std::any_of(labels.begin(), labels.end(), [](const auto& l) { return l.name == "node"; });
        if (!own) labels.push_back({"node", node});
      }
    }
  }
  return prometheus::TextSerializer().Serialize(families);
}

prometheus::Histogram::BucketBoundaries duration_buckets_s() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, 120, 300, 600};
}

}  // namespace kiln::metrics
