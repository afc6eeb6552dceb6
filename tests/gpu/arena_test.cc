// The CUDA evaluator's device arenas: whole 2 MiB, room for every case with its placement slack, and
// allocated in an order drawn per evaluation. Built with the CUDA toolkit; needs no GPU (sizes and order
// are arithmetic), so it runs without KILN_GPU_TESTS.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "cuda_device.h"
#include "kiln/eval/device.h"
#include "kiln/task/task.h"
#include "rig.h"

namespace {

TEST_CASE("every bundled CUDA task's device arena is whole 2 MiB and holds its largest case", "[arena]") {
  constexpr size_t kTwoMiB = size_t{2} << 20;
  for (const char* name : {"cuda_reduce_sum", "cuda_rmsnorm", "cuda_sgemm", "cuda_softmax", "cuda_transpose"}) {
    INFO(name);
    auto spec = kiln::task::parse_task(kiln::gpu_test::task_files(name));
    REQUIRE(spec.is_ok());
    auto bytes = kiln::cuda::device_arena_bytes(*spec);
    REQUIRE(bytes.is_ok());
    auto most = kiln::eval::largest_case_bytes(*spec, 4096);
    REQUIRE(most.is_ok());
    CHECK(*bytes % kTwoMiB == 0);
    // The largest case plus the 256 KiB the tensors move by between blocks, and less than 2 MiB more.
    CHECK(*bytes >= *most + (size_t{256} << 10));
    CHECK(*bytes < *most + (size_t{256} << 10) + kTwoMiB);
  }
}

TEST_CASE("the arenas go to the contestants in an order drawn per evaluation", "[arena]") {
  // Three contestants (candidate, reference, overhead), four arenas each.
  std::set<std::vector<size_t>> seen;
  std::set<size_t> first_holders;  // who gets the first allocation
  for (uint64_t seed = 1; seed <= 64; ++seed) {
    const std::vector<size_t> order = kiln::cuda::arena_allocation_order(3, 4, seed);
    REQUIRE(order.size() == 12);
    for (size_t who = 0; who < 3; ++who) CHECK(std::count(order.begin(), order.end(), who) == 4);
    CHECK(order == kiln::cuda::arena_allocation_order(3, 4, seed));  // one evaluation, one order
    seen.insert(order);
    first_holders.insert(order.front());
  }
  // Another evaluation, another order: each contestant gets the allocator's first memory in some of them.
  CHECK(seen.size() > 60);
  CHECK(first_holders.size() == 3);
  CHECK(kiln::cuda::arena_allocation_order(2, 1, 7).size() == 2);
  CHECK(kiln::cuda::arena_allocation_order(0, 4, 7).empty());
}

}  // namespace
