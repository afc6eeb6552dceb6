// Logging: spdlog, one line per event, the service name in every line.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace kiln::log {

// Sets the default logger: "[2026-11-29 14:52:51.123] [broker] [info] message" to stderr.
void init(const std::string& service, const std::string& level = "info");

}  // namespace kiln::log
