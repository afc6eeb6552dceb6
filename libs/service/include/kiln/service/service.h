// The common life of a worker service: parse flags, load config, start /metrics, connect to the broker,
// serve jobs until SIGTERM/SIGINT, stop with a timeout. Each services/<name>/main.cc is a few lines
// around run_worker_service().
#pragma once

#include <prometheus/registry.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/config/config.h"
#include "kiln/core/status.h"
#include "kiln/messaging/handler.h"
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

int run_worker_service(int argc, char** argv, const ServiceSpec& spec);

}  // namespace kiln::service
