#include "kiln/broker/options.h"

#include <filesystem>

namespace kiln::broker {

std::string under_state_dir(const std::string& state_dir, const std::string& path) {
  return std::filesystem::path(path).is_absolute() ? path : state_dir + "/" + path;
}

BrokerOptions options_from_config(const config::BrokerConfig& bc, const std::string& state_dir) {
  BrokerOptions opt;
  opt.bind = bc.bind;
  opt.events_bind = bc.events_bind;
  opt.db_path = under_state_dir(state_dir, bc.db_path);
  opt.max_attempts = static_cast<int>(bc.max_attempts);
  opt.heartbeat_interval_s = bc.heartbeat_interval_s;
  opt.heartbeat_liveness = static_cast<int>(bc.heartbeat_liveness);
  opt.max_message_bytes = bc.max_message_bytes;
  opt.max_table_bytes = bc.max_table_mb << 20;
  opt.retention.finished_max_age_s = bc.retention_days * 24 * 3600;
  opt.retention.finished_max_jobs = bc.retention_max_jobs;
  opt.retention_interval_s = bc.retention_interval_s;
  opt.lease_timeout_s = bc.lease_timeout_s;
  opt.device_wait_s = bc.device_wait_s;
  opt.external_bind = bc.external_bind;
  opt.allowlist_path = under_state_dir(state_dir, bc.external_allowlist);
  return opt;
}

}  // namespace kiln::broker
