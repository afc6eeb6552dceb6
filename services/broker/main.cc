// kiln-broker: parse flags, load config, start /metrics, serve until SIGTERM/SIGINT; SIGHUP re-reads the
// external bridges' allowlist.
#include <CLI/CLI.hpp>
#include <signal.h>

#include <atomic>
#include <cstdio>

#include "kiln/broker/broker.h"
#include "kiln/broker/options.h"
#include "kiln/config/config.h"
#include "kiln/core/files.h"
#include "kiln/core/signals.h"
#include "kiln/log/log.h"
#include "kiln/messaging/curve.h"
#include "kiln/metrics/metrics.h"

namespace {
std::atomic<bool> g_reload{false};
void on_hangup(int) { g_reload = true; }
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln-broker: routes Kiln jobs between services"};
  std::string config_path, state_dir = ".kiln", bind, events_bind, external_bind, metrics_host = "0.0.0.0";
  int metrics_port = -1;
  app.add_option("--config", config_path, "YAML config (default: built-in defaults)");
  app.add_option("--state-dir", state_dir, "folder for the job table");
  app.add_option("--bind", bind, "endpoint for workers and clients (overrides broker.bind)");
  app.add_option("--events-bind", events_bind, "PUB endpoint for job events (overrides broker.events_bind)");
  app.add_option("--external-bind", external_bind,
                 "CURVE endpoint for external bridges (overrides broker.external_bind)");
  app.add_option("--metrics-port", metrics_port, "port for /metrics (0 = any free port)");
  app.add_option("--metrics-host", metrics_host, "address for /metrics");
  CLI11_PARSE(app, argc, argv);

  kiln::log::init("broker");
  auto cfg = kiln::config::load_config(config_path);
  if (!cfg.is_ok()) {
    std::fprintf(stderr, "kiln-broker: %s\n", cfg.status().message().c_str());
    return 2;
  }
  const auto& bc = cfg->broker;
  if (auto st = kiln::make_dirs(state_dir); !st.is_ok()) {
    std::fprintf(stderr, "kiln-broker: %s\n", st.message().c_str());
    return 2;
  }
  kiln::broker::BrokerOptions opt = kiln::broker::options_from_config(bc, state_dir);
  if (!bind.empty()) opt.bind = bind;
  if (!events_bind.empty()) opt.events_bind = events_bind;
  if (!external_bind.empty()) opt.external_bind = external_bind;
  if (!opt.external_bind.empty()) {
    std::string secret_path = kiln::broker::under_state_dir(state_dir, bc.external_secret_key_file);
    std::string public_path = kiln::broker::under_state_dir(state_dir, bc.external_public_key_file);
    bool created = false;
    auto keys = kiln::messaging::load_or_create_curve_keypair(secret_path, public_path, &created);
    if (!keys.is_ok()) {
      std::fprintf(stderr, "kiln-broker: broker.external_bind: %s\n", keys.status().message().c_str());
      return 2;
    }
    opt.curve_secret_key = keys->secret_key;
    spdlog::info("external bridges: server public key {} in {}{}", keys->public_key, public_path,
                 created ? " (new key pair)" : "");
  }

  auto registry = std::make_shared<prometheus::Registry>();
  int port = metrics_port >= 0 ? metrics_port : bc.metrics_port;
  auto server = kiln::metrics::MetricsServer::start(registry, metrics_host, port);
  if (!server.is_ok()) {
    spdlog::error("metrics: {}", server.status().message());
    return 1;
  }
  zmq::context_t ctx(1);
  auto broker = kiln::broker::Broker::create(ctx, opt, registry);
  if (!broker.is_ok()) {
    spdlog::error("{}", broker.status().message());
    return 1;
  }
  spdlog::info("metrics on http://{}:{}/metrics", metrics_host, (*server)->port());
  const std::atomic<bool>& stop = kiln::stop_on_signals();
  struct sigaction hup {};
  hup.sa_handler = on_hangup;
  sigaction(SIGHUP, &hup, nullptr);  // re-read the external bridges' allowlist
  (*broker)->run(stop, &g_reload);
  return 0;
}
