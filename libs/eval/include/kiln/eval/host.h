// What the evaluation child knows about the CPU it runs on.
#pragma once

#include <cstddef>
#include <string>

#include "kiln/proto/payloads.h"

namespace kiln::eval {

// "AMD EPYC 9654 96-Core Processor" from /proc/cpuinfo, or "unknown CPU".
std::string cpu_model_name();
// Nominal clock from /proc/cpuinfo or cpufreq, 0 when unknown.
double cpu_clock_hz();
// Size of the last-level cache from sysfs, then sysconf, else 64 MiB.
size_t last_level_cache_bytes();
std::string host_name();
// backend "cpu", device name, clock and host.
proto::WorkerInfo cpu_worker_info();

}  // namespace kiln::eval
