#include <sched.h>

#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "kiln/core/cpus.h"

TEST_CASE("the CPUs this process may run on follow its affinity mask", "[core][cpus]") {
  const std::vector<int> all = kiln::allowed_cores();
  REQUIRE(!all.empty());
  for (size_t i = 1; i < all.size(); ++i) CHECK(all[i - 1] < all[i]);
  CHECK(kiln::allowed_core_count() == static_cast<int>(all.size()));

  // A thread pinned to one of them sees only that one.
  int seen = -1;
  size_t count = 0;
  std::thread t([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(all.back(), &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) return;
    const auto cores = kiln::allowed_cores();
    count = cores.size();
    if (!cores.empty()) seen = cores.front();
  });
  t.join();
  CHECK(count == 1);
  CHECK(seen == all.back());
}

TEST_CASE("the host's architecture is named as uname names it", "[core]") {
  const std::string arch = kiln::host_arch();
  CHECK_FALSE(arch.empty());
  CHECK(arch.find(' ') == std::string::npos);
}
