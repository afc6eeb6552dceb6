// Output comparison on the device (eval::Device::compare_outputs): the timed outputs of two contestants
// compared where they are, as eval::compare() compares them on the host, so that a comparison costs a
// pass over device memory instead of reading both back over the bus. Internal to libs/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kiln::cuda {

// The element types, numbered as task::DType numbers them (cuda_device.cc checks that they agree).
enum class CompareType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2, kF64 = 3, kI32 = 4, kI64 = 5, kI8 = 6, kU8 = 7 };

// What compare() adds to a Comparison, in device memory. The maxima are the bits of non-negative doubles
// (which order as their values do, so an integer maximum finds them).
struct CompareTotals {
  unsigned long long mismatches;
  unsigned long long nonfinite;
  unsigned long long max_abs_error_bits;
  unsigned long long max_rel_error_bits;
};

// Compares `n` elements of `got` with `expected` on `stream` and adds the result to `*totals` (device
// memory, zeroed by the caller); asynchronous. The rule is compare()'s, in the same double arithmetic
// (no fused multiply-add), so both sides count the same mismatches: |a - r| <= atol + rtol * |r| where r is
// finite (a must be finite too), a NaN where r is, a == r where r is infinite.
cudaError_t compare_on_device(const void* got, CompareType got_type, const void* expected, CompareType expected_type,
                              size_t n, double rtol, double atol, CompareTotals* totals, cudaStream_t stream);

}  // namespace kiln::cuda
