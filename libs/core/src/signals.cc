#include "kiln/core/signals.h"

#include <signal.h>

#include <mutex>

namespace kiln {

namespace {
// A signal handler may only touch a lock-free atomic; this one is process-wide by nature.
std::atomic<bool> g_stop{false};
void on_stop_signal(int) { g_stop = true; }
}  // namespace

const std::atomic<bool>& stop_on_signals() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
  });
  return g_stop;
}

}  // namespace kiln
