// The broker (DESIGN §1-2): owns the durable job table, routes jobs by service name to connected
// workers within their credit, leases with deadlines, heartbeats, requeues the jobs of dead workers,
// dead-letters after max_attempts (telling the scorer), answers status queries and forwards the others.
#pragma once

#include <prometheus/registry.h>
#include <zmq.hpp>

#include <atomic>
#include <map>
#include <memory>
#include <string>

#include "kiln/core/status.h"

namespace kiln::broker {

struct BrokerOptions {
  std::string bind = "tcp://127.0.0.1:5555";
  std::string events_bind;  // empty: no PUB socket
  std::string db_path = "broker.db";
  int max_attempts = 3;
  double heartbeat_interval_s = 1.0;
  int heartbeat_liveness = 4;
  int64_t max_message_bytes = 64ll << 20;
  std::map<std::string, double> lease_timeout_s = {{"default", 60}};
};

struct BrokerCounters {
  std::atomic<int64_t> rejected_frames{0};
  std::atomic<int64_t> duplicate_submits{0};
  std::atomic<int64_t> duplicate_followups{0};
  std::atomic<int64_t> late_results{0};
  std::atomic<int64_t> requeued{0};
  std::atomic<int64_t> dead{0};
  std::atomic<int64_t> completed{0};
};

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
  // Serves until `stop` becomes true.
  void run(const std::atomic<bool>& stop);
  const BrokerCounters& counters() const;

 private:
  Broker();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::broker
