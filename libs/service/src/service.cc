#include "kiln/service/service.h"

#include <CLI/CLI.hpp>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>

#include "kiln/core/files.h"
#include "kiln/core/signals.h"
#include "kiln/log/log.h"
#include "kiln/messaging/endpoint.h"
#include "kiln/messaging/worker.h"
#include "kiln/metrics/metrics.h"

namespace kiln::service {

namespace {

// The configured /metrics port of the section that serves `service`.
int configured_metrics_port(const config::KilnConfig& c, const std::string& service, int fallback) {
  if (service == "ingest") return c.ingest.metrics_port;
  if (service == "propose") return c.llm_bridge.metrics_port;
  if (service == "compile") return c.compiler.metrics_port;
  if (service.rfind("test.", 0) == 0) return c.tester.metrics_port;
  if (service == "score") return c.scorer.metrics_port;
  if (service == "promote") return c.promoter.metrics_port;
  return fallback;
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "host";
  return buf;
}

}  // namespace

int run_worker_service(int argc, char** argv, const ServiceSpec& spec) {
  CLI::App app{"kiln-" + spec.name + ": Kiln '" + spec.service + "' worker"};
  std::string config_path, state_dir = ".kiln", broker, worker_id, metrics_host = "0.0.0.0", log_level;
  int metrics_port = -1, slots = 0;
  app.add_option("--config", config_path, "YAML config (default: built-in defaults)");
  app.add_option("--state-dir", state_dir, "folder for this service's durable files");
  app.add_option("--broker", broker, "broker endpoint (default: from broker.bind)");
  app.add_option("--worker-id", worker_id, "unique id (default: <name>-<host>-<pid>)");
  app.add_option("--slots", slots, "jobs held at once (default: from config)");
  app.add_option("--metrics-port", metrics_port, "port for /metrics (0 = any free port)");
  app.add_option("--metrics-host", metrics_host, "address for /metrics");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error");
  CLI11_PARSE(app, argc, argv);

  auto cfg = config::load_config(config_path);
  if (!cfg.is_ok()) {
    std::fprintf(stderr, "kiln-%s: %s\n", spec.name.c_str(), cfg.status().message().c_str());
    return 2;
  }
  log::init(spec.name, log_level.empty() ? cfg->up.log_level : log_level);
  if (auto st = make_dirs(state_dir); !st.is_ok()) {
    spdlog::error("{}", st.message());
    return 2;
  }
  ServiceContext ctx;
  ctx.config = &cfg.value();
  ctx.state_dir = std::filesystem::absolute(state_dir).string();
  ctx.worker_id = worker_id.empty() ? spec.name + "-" + hostname() + "-" + std::to_string(::getpid()) : worker_id;
  ctx.metrics = std::make_shared<prometheus::Registry>();
  const std::string endpoint = broker.empty() ? messaging::connect_endpoint(cfg->broker.bind) : broker;
  messaging::SocketOptions socket_options;
  socket_options.max_message_bytes = cfg->broker.max_message_bytes;
  // Declared before the handlers, which may hold sockets of it (the blob store's), so it outlives them.
  zmq::context_t zctx(1);
  ctx.tasks = std::make_shared<TaskSource>(
      cfg->broker.blob_store == 1 ? messaging::BlobClient::connect(zctx, endpoint, socket_options) : nullptr);

  auto handlers = spec.make(ctx);
  if (!handlers.is_ok()) {
    spdlog::error("cannot start: {}", handlers.status().message());
    return 1;
  }
  int port = metrics_port >= 0 ? metrics_port : configured_metrics_port(*cfg, spec.service, spec.default_metrics_port);
  auto server = metrics::MetricsServer::start(ctx.metrics, metrics_host, port, handlers->pages);
  if (!server.is_ok()) {
    spdlog::error("metrics: {}", server.status().message());
    return 1;
  }
  messaging::WorkerOptions wo;
  wo.endpoint = endpoint;
  wo.service = handlers->service.empty() ? spec.service : handlers->service;
  wo.worker_id = ctx.worker_id;
  wo.slots = slots > 0 ? slots : handlers->slots;
  wo.caps = handlers->caps;
  if (wo.caps.host.empty()) wo.caps.host = hostname();
  wo.heartbeat_interval_s = cfg->broker.heartbeat_interval_s;
  wo.heartbeat_liveness = static_cast<int>(cfg->broker.heartbeat_liveness);
  wo.socket = socket_options;

  const std::atomic<bool>& stop = stop_on_signals();

  spdlog::info("worker {} for '{}' ({} slot(s)) -> {}; metrics on :{}", wo.worker_id, wo.service, wo.slots, wo.endpoint,
               (*server)->port());
  messaging::Worker worker(zctx, wo, handlers->job, handlers->request);
  worker.run(stop);
  if (handlers->on_stop) handlers->on_stop();
  spdlog::info("stopped");
  return 0;
}

}  // namespace kiln::service
