#include "kiln/tester/options.h"

#include <filesystem>
#include <system_error>

namespace kiln::tester {

Result<TesterOptions> options_from_config(const config::TesterConfig& config) {
  TesterOptions o;
  auto backend = proto::parse_backend(config.backend);
  if (!backend.is_ok()) return invalid_argument("tester: unknown backend '" + config.backend + "' (cpu | cuda)");
  o.backend = *backend;
  o.gpu_index = config.gpu_index;
  o.gpu_claim_dir = config.gpu_claim_dir;
  o.timeout_s = config.timeout_s;
  o.cpu_time_limit_s = config.cpu_time_limit_s;
  o.memory_limit_mb = config.memory_limit_mb;
  o.pin_cores = config.pin_cores;
  o.slots = config.slots > 0 ? config.slots : *backend == proto::Backend::kCuda ? config::kDefaultCudaSlots : 1;
  o.screen_by_best = config.screen_by_best != 0;
  o.timing = config.timing;
  o.profile = config.profile;
  o.profile_scope = config.profile_scope;
  o.ncu = config.ncu;
  o.profile_timeout_s = config.profile_timeout_s;
  o.sandbox_uid = static_cast<uint32_t>(config.sandbox_uid);
  o.allow_unconfined = config.allow_unconfined != 0;
  o.python_config = config.python;
  return o;
}

Result<std::string> default_eval_binary(proto::Backend backend) {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return not_found("tester: cannot read /proc/self/exe: " + ec.message());
  return (self.parent_path() / (backend == proto::Backend::kCuda ? "kiln-eval-cuda" : "kiln-eval")).string();
}

}  // namespace kiln::tester
