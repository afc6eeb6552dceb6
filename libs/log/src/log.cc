#include "kiln/log/log.h"

#include <spdlog/sinks/stdout_sinks.h>

namespace kiln::log {

void init(const std::string& service, const std::string& level) {
  auto logger = spdlog::stderr_logger_mt(service);
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v");
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace kiln::log
