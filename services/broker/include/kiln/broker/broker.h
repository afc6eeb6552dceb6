// The broker (DESIGN §1-2): owns the durable job table, routes jobs by service name to connected
// workers within their credit, leases with deadlines, heartbeats, requeues the jobs of dead workers,
// dead-letters after max_attempts (telling the scorer), answers status queries and forwards the others.
#pragma once

#include <prometheus/registry.h>
#include <zmq.hpp>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/log/rate_limit.h"

namespace kiln::broker {

struct BrokerOptions {
  std::string bind = "tcp://127.0.0.1:5555";
  std::string events_bind;  // empty: no PUB socket
  std::string db_path = "broker.db";
  int max_attempts = 3;
  double heartbeat_interval_s = 1.0;
  int heartbeat_liveness = 4;
  // The largest message body the broker accepts. Its sockets take frames up to twice this (ZMQ_MAXMSGSIZE),
  // so a frame somewhat over the limit reaches the broker, is counted (reason "oversized") and answered;
  // ZeroMQ drops the connection of a peer whose frame is over twice the limit before anyone can read it
  // (counted in kiln_broker_disconnects_total only).
  int64_t max_message_bytes = 64ll << 20;
  int64_t max_table_bytes = 0;  // bound on the job table's file; 0: none
  // Workers registered at once (each READY from a new connection is one). Past it a READY is refused with
  // a reason, so a peer opening connections in a loop cannot grow the broker's state without bound.
  size_t max_workers = 4096;
  std::map<std::string, double> lease_timeout_s = {{"default", 60}};

  // External bridges (DESIGN §2): a second ROUTER endpoint with CURVE. Empty external_bind: none.
  std::string external_bind;
  std::string curve_secret_key;  // Z85: the broker's key pair (bridges pin its public key)
  std::string allowlist_path;    // "<name> <z85 public key>" per line; a missing file admits no one
  // What an admitted bridge may do: serve these services, and lead its results only to these.
  std::vector<std::string> external_services = {"propose.external"};
  std::vector<std::string> external_followups = {"compile", "score"};

  // Logs of rejected messages and of job-table failures: lines per reason per interval, then one summary.
  log::RateLimitOptions log_limits{5, 1.0, 64};
  // Fault injection for tests: when set, called before every job-table write with the operation's name
  // ("insert", "lease", "requeue", "complete"); a non-ok status fails that write as a full disk would.
  std::function<Status(std::string_view op)> store_write_fault;
};

struct BrokerCounters {
  std::atomic<int64_t> rejected_frames{0};
  std::atomic<int64_t> duplicate_submits{0};
  std::atomic<int64_t> duplicate_followups{0};
  std::atomic<int64_t> late_results{0};
  std::atomic<int64_t> requeued{0};
  std::atomic<int64_t> dead{0};
  std::atomic<int64_t> completed{0};
  std::atomic<int64_t> bridge_messages{0};       // received on the external endpoint
  std::atomic<int64_t> bridge_auth_failures{0};  // CURVE clients the ZAP handler refused
  std::atomic<int64_t> allowlist_reloads{0};     // successful (re)loads, the first one included
  std::atomic<int64_t> store_write_failures{0};  // job-table writes that failed (disk or table full)
  std::atomic<bool> store_writable{true};        // false from a failed write until one succeeds
  std::atomic<int64_t> refused_results{0};       // RESULTs refused (their jobs released at once)
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
