// The CPUs this process may run on (its affinity mask: what taskset, cpusets and container limits by
// cpuset leave it).
#pragma once

#include <vector>

namespace kiln {

// Their numbers, ascending; empty if the kernel would not say.
std::vector<int> allowed_cores();

// How many; at least 1.
int allowed_core_count();

}  // namespace kiln
