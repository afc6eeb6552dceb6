#include "kiln/core/time.h"

#include <chrono>
#include <ctime>

namespace kiln {

double wall_time_s() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

double monotonic_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string iso8601_utc(double wall_s) {
  std::time_t t = static_cast<std::time_t>(wall_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace kiln
