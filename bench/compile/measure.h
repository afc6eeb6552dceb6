// What the compile benches measure with: the CPU time of the build tools, and a median.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <vector>

namespace kiln::bench {

// User + system time of the waited-for child processes so far (the tools every build ran).
inline double children_cpu_s() {
  rusage u{};
  ::getrusage(RUSAGE_CHILDREN, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace kiln::bench
