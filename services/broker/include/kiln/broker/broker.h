// The broker (DESIGN §1-2): owns the durable job table, routes jobs by service name to connected
// workers within their credit, leases with deadlines, heartbeats, requeues the jobs of dead workers,
// dead-letters after max_attempts (telling the scorer), answers status queries and forwards the others.
// Broker is the event loop that wires its parts: the job queue (job_queue.h, no sockets), the commands
// (commands.h), the queries (queries.h), bridge authentication (bridge_auth.h) and metrics (metrics.h).
#pragma once

#include <prometheus/registry.h>
#include <zmq.hpp>

#include <atomic>
#include <memory>
#include <string>

#include "kiln/broker/metrics.h"
#include "kiln/broker/options.h"
#include "kiln/core/status.h"

namespace kiln::broker {

class Broker {
 public:
  static Result<std::unique_ptr<Broker>> create(zmq::context_t& context, BrokerOptions options,
                                                std::shared_ptr<prometheus::Registry> metrics);
  ~Broker();
  Broker(const Broker&) = delete;
  Broker& operator=(const Broker&) = delete;

  // The endpoint actually bound (resolves "tcp://127.0.0.1:*").
  const std::string& endpoint() const;
  const std::string& events_endpoint() const;
  // The CURVE endpoint for external bridges actually bound; empty when there is none.
  const std::string& external_endpoint() const;
  // Serves until `stop` becomes true. Whenever `reload_allowlist` is set (SIGHUP in kiln-broker), the
  // loop clears it and re-reads the allowlist; a changed file (mtime or size) is re-read as well. A list
  // that fails to parse keeps the previous one.
  void run(const std::atomic<bool>& stop, std::atomic<bool>* reload_allowlist = nullptr);
  const BrokerCounters& counters() const;

 private:
  Broker();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::broker
