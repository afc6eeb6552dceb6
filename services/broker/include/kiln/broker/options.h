// The broker's options (DESIGN §2, §9): BrokerOptions, and the one mapping from its config section that
// kiln-broker uses, so tests can check what a config file gives end to end (leases, limits) without
// starting the process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/broker/job_table.h"
#include "kiln/config/config.h"
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
  // Ended jobs kept in the table (job_table.h), and how often retention runs (0: never).
  RetentionOptions retention;
  double retention_interval_s = 60;
  // Workers registered at once (each READY from a new connection is one). Past it a READY is refused with
  // a reason, so a peer opening connections in a loop cannot grow the broker's state without bound.
  size_t max_workers = 4096;
  std::map<std::string, double> lease_timeout_s = {{"default", 60}};
  // How long a job that needs a device model (FollowUp::device: a confirmation) waits while no worker of
  // that model serves its service, before it is dead-lettered saying so (not the candidate's fault); 0:
  // for ever.
  double device_wait_s = 600;

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

// `state_dir` anchors relative paths (the job table, the allowlist). The CURVE key pair is left to the
// caller (it may create files).
BrokerOptions options_from_config(const config::BrokerConfig& config, const std::string& state_dir);

// `path` as is when absolute, else under `state_dir`.
std::string under_state_dir(const std::string& state_dir, const std::string& path);

}  // namespace kiln::broker
