#include "kiln/metrics/metrics.h"

#include <httplib.h>
#include <sys/socket.h>
#include <prometheus/text_serializer.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "kiln/core/time.h"

namespace kiln::metrics {

namespace {
// Scrapes are rare and tiny: two handler threads are plenty, and one request per connection keeps
// shutdown prompt (no keep-alive connection holds a worker thread when the server stops).
constexpr size_t kHandlerThreads = 2;
constexpr double kStartTimeoutS = 5.0;
}  // namespace

struct MetricsServer::Impl {
  std::shared_ptr<prometheus::Registry> registry;
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
  auto* reg = impl.registry.get();
  impl.server.Get("/metrics", [reg](const httplib::Request&, httplib::Response& res) {
    res.set_content(render(*reg), kContentType);
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

std::string render(prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

prometheus::Histogram::BucketBoundaries duration_buckets_s() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, 120, 300, 600};
}

}  // namespace kiln::metrics
