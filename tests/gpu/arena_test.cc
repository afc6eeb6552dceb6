// The CUDA evaluator's device arenas: whole 2 MiB, and room for every case with its placement slack. Built
// with the CUDA toolkit; needs no GPU (the sizes are arithmetic on the task), so it runs without
// KILN_GPU_TESTS.
#include <catch2/catch.hpp>
#include <string>

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

}  // namespace
