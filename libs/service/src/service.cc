#include "kiln/service/service.h"

#include <CLI/CLI.hpp>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <iostream>

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

ParsedFlags parse_flags(int argc, const char* const* argv, const ServiceSpec& spec, std::ostream& out,
                        std::ostream& err) {
  ParsedFlags parsed;
  ServiceFlags& f = parsed.flags;
  CLI::App app{"kiln-" + spec.name + ": Kiln '" + spec.service + "' worker"};
  app.add_option("--config", f.config_path, "YAML config (default: built-in defaults)");
  app.add_option("--state-dir", f.state_dir, "folder for this service's durable files");
  app.add_option("--broker", f.broker, "broker endpoint (default: from broker.bind)");
  app.add_option("--worker-id", f.worker_id, "unique id (default: <name>-<host>-<pid>)");
  app.add_option("--slots", f.slots, "jobs held at once (default: from config)");
  app.add_option("--metrics-port", f.metrics_port, "port for /metrics (0 = any free port)");
  app.add_option("--metrics-host", f.metrics_host, "address for /metrics");
  app.add_option("--log-level", f.log_level, "trace|debug|info|warn|error");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    parsed.exit_status = app.exit(e, out, err);
  }
  return parsed;
}

Result<ServiceContext> make_context(const ServiceSpec& spec, const ServiceFlags& flags,
                                    const config::KilnConfig& config) {
  KILN_RETURN_IF_ERROR(make_dirs(flags.state_dir));
  ServiceContext ctx;
  ctx.config = &config;
  ctx.state_dir = std::filesystem::absolute(flags.state_dir).string();
  ctx.worker_id =
      flags.worker_id.empty() ? spec.name + "-" + hostname() + "-" + std::to_string(::getpid()) : flags.worker_id;
  ctx.metrics = std::make_shared<prometheus::Registry>();
  return ctx;
}

int metrics_port(const ServiceSpec& spec, const ServiceFlags& flags, const config::KilnConfig& config) {
  if (flags.metrics_port >= 0) return flags.metrics_port;
  return configured_metrics_port(config, spec.service, spec.default_metrics_port);
}

std::string broker_endpoint(const ServiceFlags& flags, const config::KilnConfig& config) {
  return flags.broker.empty() ? messaging::connect_endpoint(config.broker.bind) : flags.broker;
}

messaging::SocketOptions socket_options(const config::KilnConfig& config) {
  messaging::SocketOptions options;
  options.max_message_bytes = config.broker.max_message_bytes;
  return options;
}

messaging::WorkerOptions worker_options(const ServiceSpec& spec, const ServiceFlags& flags,
                                        const config::KilnConfig& config, const ServiceContext& context,
                                        const ServiceHandlers& handlers) {
  messaging::WorkerOptions wo;
  wo.endpoint = broker_endpoint(flags, config);
  wo.service = handlers.service.empty() ? spec.service : handlers.service;
  wo.worker_id = context.worker_id;
  wo.slots = flags.slots > 0 ? flags.slots : handlers.slots;
  wo.caps = handlers.caps;
  if (wo.caps.host.empty()) wo.caps.host = hostname();
  wo.heartbeat_interval_s = config.broker.heartbeat_interval_s;
  wo.heartbeat_liveness = static_cast<int>(config.broker.heartbeat_liveness);
  wo.socket = socket_options(config);
  return wo;
}

int run_worker_service(int argc, char** argv, const ServiceSpec& spec) {
  const ParsedFlags parsed = parse_flags(argc, argv, spec, std::cout, std::cerr);
  if (parsed.exit_status) return *parsed.exit_status;
  const ServiceFlags& flags = parsed.flags;

  auto cfg = config::load_config(flags.config_path);
  if (!cfg.is_ok()) {
    std::fprintf(stderr, "kiln-%s: %s\n", spec.name.c_str(), cfg.status().message().c_str());
    return 2;
  }
  log::init(spec.name, flags.log_level.empty() ? cfg->up.log_level : flags.log_level);
  // Declared before everything that may hold a socket of it: the context's task source (the blob store's
  // client) and the handlers. Destroyed last, it finds every socket closed; a socket still open would make
  // its destructor wait for ever (zmq_ctx_term), and the service would not stop.
  zmq::context_t zctx(1);
  auto ctx = make_context(spec, flags, *cfg);
  if (!ctx.is_ok()) {
    spdlog::error("{}", ctx.status().message());
    return 2;
  }
  ctx->tasks = std::make_shared<TaskSource>(
      cfg->broker.blob_store == 1
          ? messaging::BlobClient::connect(zctx, broker_endpoint(flags, *cfg), socket_options(*cfg))
          : nullptr);
  auto handlers = spec.make(*ctx);
  if (!handlers.is_ok()) {
    spdlog::error("cannot start: {}", handlers.status().message());
    return 1;
  }
  auto server =
      metrics::MetricsServer::start(ctx->metrics, flags.metrics_host, metrics_port(spec, flags, *cfg), handlers->pages);
  if (!server.is_ok()) {
    spdlog::error("metrics: {}", server.status().message());
    return 1;
  }
  const messaging::WorkerOptions wo = worker_options(spec, flags, *cfg, *ctx, *handlers);

  // Installed before the line below says the worker runs: whoever waits for that line may stop it.
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
