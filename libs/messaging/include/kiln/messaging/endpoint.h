// Endpoint helpers shared by everything that connects to the broker.
#pragma once

#include <string>

namespace kiln::messaging {

// A bind address ("tcp://*:5555", "tcp://0.0.0.0:5555") as the address to connect to on this host.
inline std::string connect_endpoint(const std::string& bind) {
  for (const char* any : {"tcp://*:", "tcp://0.0.0.0:"}) {
    std::string prefix(any);
    if (bind.rfind(prefix, 0) == 0) return "tcp://127.0.0.1:" + bind.substr(prefix.size());
  }
  return bind;
}

}  // namespace kiln::messaging
