#include "kiln/tester/slots.h"

#include <cstddef>

namespace kiln::tester {

std::vector<std::string> openmp_env(const std::vector<int>& cores) {
  std::vector<std::string> env = {"OMP_WAIT_POLICY=passive", "OMP_DYNAMIC=false"};
  if (!cores.empty()) {
    env.push_back("OMP_NUM_THREADS=" + std::to_string(cores.size()));
    env.push_back("OMP_PROC_BIND=close");
    env.push_back("OMP_PLACES=cores");
  }
  return env;
}

std::vector<std::vector<int>> split_cores(const std::vector<int>& cores, int64_t slots) {
  if (slots < 1 || cores.size() < static_cast<size_t>(slots)) return {};
  std::vector<std::vector<int>> groups(static_cast<size_t>(slots));
  const size_t base = cores.size() / groups.size(), extra = cores.size() % groups.size();
  size_t at = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const size_t n = base + (g < extra ? 1 : 0);
    groups[g].assign(cores.begin() + static_cast<std::ptrdiff_t>(at),
                     cores.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  return groups;
}

Slots::Slots(int64_t count, const std::vector<int>& cores) {
  if (count <= 1) return;
  taken_.assign(static_cast<size_t>(count), false);
  cores_ = split_cores(cores, count);
}

int Slots::take() {
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < taken_.size(); ++i) {
    if (!taken_[i]) {
      taken_[i] = true;
      return static_cast<int>(i);
    }
  }
  return -1;
}

void Slots::give(int slot) {
  if (slot < 0) return;
  std::lock_guard lock(mu_);
  taken_.at(static_cast<size_t>(slot)) = false;
}

const std::vector<int>& Slots::cores(int slot) const {
  static const std::vector<int> kNone;
  return slot >= 0 && static_cast<size_t>(slot) < cores_.size() ? cores_[static_cast<size_t>(slot)] : kNone;
}

}  // namespace kiln::tester
