// The common life of a worker service: parse flags, load config, start /metrics, connect to the broker,
// serve jobs until SIGTERM/SIGINT, stop with a timeout. Each services/<name>/main.cc is a few lines
// around run_worker_service().
#pragma once

#include <prometheus/registry.h>

#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/config/config.h"
#include "kiln/core/status.h"
#include "kiln/messaging/handler.h"
#include "kiln/messaging/worker.h"
#include "kiln/metrics/metrics.h"
#include "kiln/proto/wire.h"
#include "kiln/service/task_source.h"

namespace kiln::service {

// What a handler factory gets to build its handler.
struct ServiceContext {
  const config::KilnConfig* config = nullptr;
  std::string state_dir;  // where durable files go (absolute)
  std::string worker_id;  // unique per process start
  std::shared_ptr<prometheus::Registry> metrics;
  // Task packages by blob name (task_source.h); set by run_worker_service, null in tests that pass
  // packages inline (make_* factories then make their own inline-only source).
  std::shared_ptr<TaskSource> tasks;
};

struct ServiceHandlers {
  messaging::JobHandler job;
  messaging::RequestHandler request;  // optional
  proto::Capabilities caps;
  int slots = 1;
  std::string service;               // overrides the spec's service name when set (e.g. test.cuda vs test.cpu)
  std::function<void()> on_stop;     // optional
  std::vector<metrics::Page> pages;  // served beside /metrics (optional)
};

struct ServiceSpec {
  std::string name;     // process name for logs: "compiler"
  std::string service;  // default broker service: "compile"
  // Returns the handlers, or an error that stops the process with one line.
  std::function<Result<ServiceHandlers>(const ServiceContext&)> make;
  int default_metrics_port = 0;
};

// Parses the flags, loads the config, builds the context and the handlers, serves /metrics and the
// handlers' pages, and serves jobs until SIGTERM/SIGINT. Exit status: 0 after a stop (or --help), 2 for a
// bad config or state dir, 1 when the handlers or /metrics cannot start (one line on stderr), CLI11's code
// for a bad flag.
int run_worker_service(int argc, char** argv, const ServiceSpec& spec);

// The pieces of run_worker_service, in the order it calls them.

// The command line of a worker service.
struct ServiceFlags {
  std::string config_path;          // --config: empty means built-in defaults
  std::string state_dir = ".kiln";  // --state-dir
  std::string broker;               // --broker: empty means the config's broker.bind
  std::string worker_id;            // --worker-id: empty means <name>-<host>-<pid>
  int slots = 0;                    // --slots: 0 means what the handlers ask for
  int metrics_port = -1;            // --metrics-port: -1 means the configured port, 0 any free port
  std::string metrics_host = "0.0.0.0";
  std::string log_level;  // --log-level: empty means the config's up.log_level
};

// The flags to run with, or, when the process should end now, its exit status: 0 after --help (written on
// `out`), CLI11's code after a bad flag (the error and a hint written on `err`).
struct ParsedFlags {
  ServiceFlags flags;
  std::optional<int> exit_status;
};
ParsedFlags parse_flags(int argc, const char* const* argv, const ServiceSpec& spec, std::ostream& out,
                        std::ostream& err);

// The context the handler factory gets: the state dir created and made absolute, the worker id defaulted to
// <name>-<host>-<pid>, a fresh metrics registry. `config` must outlive the context.
Result<ServiceContext> make_context(const ServiceSpec& spec, const ServiceFlags& flags,
                                    const config::KilnConfig& config);

// The /metrics port: --metrics-port when given, else the port of the config section that serves
// spec.service, else spec.default_metrics_port.
int metrics_port(const ServiceSpec& spec, const ServiceFlags& flags, const config::KilnConfig& config);

// The broker a worker (and its blob client) connects to: --broker, else broker.bind as a connect address.
std::string broker_endpoint(const ServiceFlags& flags, const config::KilnConfig& config);
// Socket options from the config (the message size limit).
messaging::SocketOptions socket_options(const config::KilnConfig& config);

// How the worker connects and what it advertises: flags first, then what the handlers ask for, then the
// config (the broker endpoint, heartbeats, the message size limit).
messaging::WorkerOptions worker_options(const ServiceSpec& spec, const ServiceFlags& flags,
                                        const config::KilnConfig& config, const ServiceContext& context,
                                        const ServiceHandlers& handlers);

}  // namespace kiln::service
