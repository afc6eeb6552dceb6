#include <filesystem>

#include "kiln/compiler/handler.h"

namespace kiln::compiler {

CompilerOptions options_from_config(const config::CompilerConfig& config, const std::string& state_dir) {
  CompilerOptions o;
  o.cache_dir = std::filesystem::path(config.cache_dir).is_absolute() || state_dir.empty()
                    ? config.cache_dir
                    : (std::filesystem::path(state_dir) / config.cache_dir).string();
  o.timeout_s = config.timeout_s;
  o.cxx = config.cxx;
  o.nvcc = config.nvcc;
  o.cuda_arch = config.cuda_arch;
  o.nvcc_mode = config.nvcc_mode;
  o.huge_pages = config.huge_pages == "on";
  o.lean_headers = config.lean_headers == "on";
  o.max_log_bytes = config.max_log_bytes;
  // A batch needs builds that arrive together: a compiler of one slot never has two.
  o.batch_max = config.slots > 1 ? config.batch_max : 1;
  o.batch_window_s = static_cast<double>(config.batch_window_ms) / 1000.0;
  o.batch_cores = config.batch_cores;
  return o;
}

}  // namespace kiln::compiler
