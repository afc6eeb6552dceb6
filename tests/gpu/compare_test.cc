// The evaluator's output comparison on the device (libs/cuda/src/compare.cu) against eval::compare() on the
// host: the same mismatches, non-finite values and largest errors, bit for bit, for every element type and
// the values where they could part ways (at the tolerance's edge, NaN, infinities, zero). Built with the
// CUDA toolkit; skips unless KILN_GPU_TESTS=1.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "compare.h"
#include "kiln/cuda/runtime.h"
#include "kiln/eval/tensor.h"
#include "rig.h"

namespace {

using kiln::eval::Comparison;
using kiln::eval::HostTensor;
using kiln::task::DType;

// `expected` from a seed, and `got` from it: equal, a little off, right at or just past the tolerance's
// edge, far off, and the special values, element by element.
void fill_pair(HostTensor& got, HostTensor& expected, double rtol, double atol) {
  expected.fill(kiln::task::InitKind::kNormal, 0, 3, 7);
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const bool floating = expected.is_floating();
  for (size_t i = 0; i < expected.elements(); ++i) {
    const double r = expected.get(i);
    const double edge = atol + rtol * std::fabs(r);
    switch (i % 13) {
      case 0: got.set(i, r); break;
      case 1: got.set(i, r + edge * 0.5); break;
      case 2: got.set(i, r + edge); break;
      case 3: got.set(i, r - edge); break;
      case 4: got.set(i, r + edge * 1.0000001); break;
      case 5: got.set(i, r + 10 * edge + 1); break;
      case 6: got.set(i, std::nextafter(r + edge, inf)); break;
      case 7:
        if (floating) expected.set(i, nan);
        got.set(i, floating ? nan : r);
        break;
      case 8: got.set(i, floating ? nan : r); break;
      case 9:
        if (floating) expected.set(i, -inf);
        got.set(i, floating ? -inf : r);
        break;
      case 10:
        if (floating) expected.set(i, inf);
        got.set(i, floating ? -inf : r + 1);
        break;
      case 11:
        expected.set(i, 0);
        got.set(i, i % 2 ? atol : 2 * atol);
        break;
      default: got.set(i, floating ? inf : r - 1); break;
    }
  }
}

}  // namespace

TEST_CASE("device comparison: the same counts and largest errors as the host's, bit for bit", "[gpu][compare]") {
  KILN_REQUIRE_GPU_TESTS();
  using kiln::cuda::CompareTotals;
  using kiln::cuda::CompareType;
  for (DType dtype :
       {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI32, DType::kI64, DType::kI8, DType::kU8}) {
    for (const auto& [rtol, atol] : std::vector<std::pair<double, double>>{{1e-5, 1e-6}, {1e-2, 1e-2}, {0, 0}}) {
      INFO("dtype " << kiln::task::dtype_name(dtype) << " rtol " << rtol << " atol " << atol);
      // Enough elements for many blocks and a tail that fills no warp.
      HostTensor got(dtype, {1 << 20 | 77}), expected(dtype, {1 << 20 | 77});
      fill_pair(got, expected, rtol, atol);
      Comparison host;
      kiln::eval::compare(got, expected, rtol, atol, "y", "", 0, host);

      auto g = kiln::cuda::DeviceBuffer::allocate(got.bytes());
      auto e = kiln::cuda::DeviceBuffer::allocate(expected.bytes());
      auto t = kiln::cuda::DeviceBuffer::allocate(sizeof(CompareTotals));
      REQUIRE(g.is_ok());
      REQUIRE(e.is_ok());
      REQUIRE(t.is_ok());
      REQUIRE(cudaMemcpy(g->data(), got.data(), got.bytes(), cudaMemcpyHostToDevice) == cudaSuccess);
      REQUIRE(cudaMemcpy(e->data(), expected.data(), expected.bytes(), cudaMemcpyHostToDevice) == cudaSuccess);
      REQUIRE(cudaMemset(t->data(), 0, sizeof(CompareTotals)) == cudaSuccess);
      auto* totals = static_cast<CompareTotals*>(t->data());
      REQUIRE(kiln::cuda::compare_on_device(g->data(), static_cast<CompareType>(dtype), e->data(),
                                            static_cast<CompareType>(dtype), got.elements(), rtol, atol, totals,
                                            nullptr) == cudaSuccess);
      CompareTotals device{};
      REQUIRE(cudaMemcpy(&device, totals, sizeof device, cudaMemcpyDeviceToHost) == cudaSuccess);
      double max_abs = 0, max_rel = 0;
      std::memcpy(&max_abs, &device.max_abs_error_bits, sizeof max_abs);
      std::memcpy(&max_rel, &device.max_rel_error_bits, sizeof max_rel);
      CHECK(host.mismatches > 0);
      CHECK(static_cast<int64_t>(device.mismatches) == host.mismatches);
      CHECK(static_cast<int64_t>(device.nonfinite) == host.nonfinite);
      CHECK(max_abs == host.max_abs_error);
      CHECK(max_rel == host.max_rel_error);

      // Equal outputs: nothing found on either side.
      REQUIRE(cudaMemset(t->data(), 0, sizeof(CompareTotals)) == cudaSuccess);
      REQUIRE(kiln::cuda::compare_on_device(e->data(), static_cast<CompareType>(dtype), e->data(),
                                            static_cast<CompareType>(dtype), got.elements(), rtol, atol, totals,
                                            nullptr) == cudaSuccess);
      REQUIRE(cudaMemcpy(&device, totals, sizeof device, cudaMemcpyDeviceToHost) == cudaSuccess);
      Comparison same;
      kiln::eval::compare(expected, expected, rtol, atol, "y", "", 0, same);
      CHECK(static_cast<int64_t>(device.mismatches) == same.mismatches);
      CHECK(device.max_abs_error_bits == 0);
    }
  }
}
