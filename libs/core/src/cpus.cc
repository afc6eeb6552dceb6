#include "kiln/core/cpus.h"

#include <sched.h>
#include <sys/utsname.h>

#include <algorithm>

namespace kiln {

std::vector<int> allowed_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cores;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cores;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cores.push_back(c);
  }
  return cores;
}

int allowed_core_count() { return std::max(1, static_cast<int>(allowed_cores().size())); }

std::string host_arch() {
  utsname u{};
  return uname(&u) == 0 ? u.machine : "";
}

}  // namespace kiln
