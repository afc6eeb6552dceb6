// The TCP ports `kiln up` is about to have its services bind, checked before anything starts: a second
// Kiln on the ports of a running one would otherwise restart its broker for ever while its workers
// joined the first one's broker.
#pragma once

#include <string>
#include <vector>

#include "kiln/config/config.h"
#include "kiln/core/status.h"

namespace kiln::cli {

struct ServicePort {
  std::string host;  // the address to bind ("0.0.0.0" for any)
  int port = 0;
  std::string what;  // "broker.bind", "compiler-2 metrics"
};

// The metrics port of replica `replica` (0-based) of a service whose first replica uses `base`; 0 stays 0.
inline int replica_port(int base, int replica) { return base == 0 ? 0 : base + 100 * replica; }

// Every port the services of `kiln up` bind under `config` (ports of 0, "any free port", left out).
std::vector<ServicePort> ports_of(const config::KilnConfig& config);

// failed_precondition naming the first port of `ports` that something holds, and the process that
// listens on it when this user may see it: "port 5555 (broker.bind) is in use by kiln-broker (pid 4711)".
Status check_ports_free(const std::vector<ServicePort>& ports);

// "kiln-broker (pid 4711)" for the process listening on TCP `port` here; "" when none can be seen.
std::string listener_of(int port);

}  // namespace kiln::cli
