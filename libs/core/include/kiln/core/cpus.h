// The CPUs this process may run on (its affinity mask: what taskset, cpusets and container limits by
// cpuset leave it), and what they are.
#pragma once

#include <string>
#include <vector>

namespace kiln {

// Their numbers, ascending; empty if the kernel would not say.
std::vector<int> allowed_cores();

// How many; at least 1.
int allowed_core_count();

// The machine's architecture as uname(2) names it ("x86_64", "aarch64"); "" if it would not say. Workers
// report it in their capabilities, so jobs built for one architecture go to hosts of that architecture.
std::string host_arch();

}  // namespace kiln
