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
// Size of the last-level cache one core fills: from sysfs, then sysconf (at most 128 MiB), else 64 MiB.
size_t last_level_cache_bytes();
std::string host_name();
// Writes back and evicts every cache line of [p, p + bytes) from every cache of the machine (clflush on
// x86-64, dc civac on AArch64). False, doing nothing, on a CPU without such an instruction.
bool evict_from_caches(const void* p, size_t bytes);
// backend "cpu", device name, clock and host.
proto::WorkerInfo cpu_worker_info();

}  // namespace kiln::eval
