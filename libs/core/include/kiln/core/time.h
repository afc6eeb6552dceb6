#pragma once

#include <cstdint>
#include <string>

namespace kiln {

// Seconds since the Unix epoch, wall clock (for records and deadlines stored on disk).
double wall_time_s();
// Seconds on a monotonic clock (for timeouts and durations inside one process).
double monotonic_s();
// "2026-11-29T14:52:51Z"
std::string iso8601_utc(double wall_s);

}  // namespace kiln
