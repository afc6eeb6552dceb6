// The broker's options from its config section: the one mapping kiln-broker uses, so tests can check what
// a config file gives end to end (leases, limits) without starting the process.
#pragma once

#include <string>

#include "kiln/broker/broker.h"
#include "kiln/config/config.h"

namespace kiln::broker {

// `state_dir` anchors relative paths (the job table, the allowlist). The CURVE key pair is left to the
// caller (it may create files).
BrokerOptions options_from_config(const config::BrokerConfig& config, const std::string& state_dir);

// `path` as is when absolute, else under `state_dir`.
std::string under_state_dir(const std::string& state_dir, const std::string& path);

}  // namespace kiln::broker
