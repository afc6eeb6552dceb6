// The stop flag every long-running Kiln process watches: set by SIGTERM or SIGINT.
#pragma once

#include <atomic>

namespace kiln {

// Installs the SIGTERM/SIGINT handlers (once per process) and returns the flag they set.
const std::atomic<bool>& stop_on_signals();

}  // namespace kiln
