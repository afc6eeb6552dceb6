#include <cuda_fp16.h>

#include "compare.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 2048;

// Element i as a double, exactly as HostTensor::get() reads it.
__device__ double element(const void* p, CompareType type, size_t i) {
  switch (type) {
    case CompareType::kF32: return static_cast<const float*>(p)[i];
    case CompareType::kF64: return static_cast<const double*>(p)[i];
    case CompareType::kF16: return __half2float(static_cast<const __half*>(p)[i]);
    case CompareType::kBF16:
      return __uint_as_float(static_cast<unsigned int>(static_cast<const unsigned short*>(p)[i]) << 16);
    case CompareType::kI32: return static_cast<const int32_t*>(p)[i];
    case CompareType::kI64: return static_cast<double>(static_cast<const long long*>(p)[i]);
    case CompareType::kI8: return static_cast<const int8_t*>(p)[i];
    case CompareType::kU8: return static_cast<const uint8_t*>(p)[i];
  }
  return 0;
}

struct Partial {
  unsigned long long mismatches = 0, nonfinite = 0;
  double max_abs = 0, max_rel = 0;
};

// compare_range() of libs/eval/src/tensor.cc for one element; the rounding intrinsics keep nvcc from
// fusing the multiply and the add, which the host does not.
__device__ void compare_one(double a, double r, double rtol, double atol, Partial& p) {
  bool ok;
  if (isfinite(r)) {
    if (!isfinite(a)) {
      ok = false;
      ++p.nonfinite;
    } else {
      const double abs_err = fabs(__dsub_rn(a, r));
      p.max_abs = fmax(p.max_abs, abs_err);
      if (r != 0) p.max_rel = fmax(p.max_rel, __ddiv_rn(abs_err, fabs(r)));
      ok = abs_err <= __dadd_rn(atol, __dmul_rn(rtol, fabs(r)));
    }
  } else if (isnan(r)) {
    ok = isnan(a);
  } else {
    ok = a == r;
  }
  if (!ok) ++p.mismatches;
}

template <bool kF32>
__global__ void compare_kernel(const void* got, CompareType got_type, const void* expected, CompareType expected_type,
                               size_t n, double rtol, double atol, CompareTotals* totals) {
  Partial p;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if constexpr (kF32) {
      compare_one(static_cast<const float*>(got)[i], static_cast<const float*>(expected)[i], rtol, atol, p);
    } else {
      compare_one(element(got, got_type, i), element(expected, expected_type, i), rtol, atol, p);
    }
  }
  // The warp's partials to its first lane, then one atomic per warp.
  for (int offset = 16; offset > 0; offset /= 2) {
    p.mismatches += __shfl_down_sync(0xffffffffu, p.mismatches, offset);
    p.nonfinite += __shfl_down_sync(0xffffffffu, p.nonfinite, offset);
    p.max_abs = fmax(p.max_abs, __shfl_down_sync(0xffffffffu, p.max_abs, offset));
    p.max_rel = fmax(p.max_rel, __shfl_down_sync(0xffffffffu, p.max_rel, offset));
  }
  if (threadIdx.x % 32 != 0) return;
  if (p.mismatches) atomicAdd(&totals->mismatches, p.mismatches);
  if (p.nonfinite) atomicAdd(&totals->nonfinite, p.nonfinite);
  atomicMax(&totals->max_abs_error_bits, static_cast<unsigned long long>(__double_as_longlong(p.max_abs)));
  atomicMax(&totals->max_rel_error_bits, static_cast<unsigned long long>(__double_as_longlong(p.max_rel)));
}

}  // namespace

cudaError_t compare_on_device(const void* got, CompareType got_type, const void* expected, CompareType expected_type,
                              size_t n, double rtol, double atol, CompareTotals* totals, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const size_t wanted = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < kMaxBlocks ? wanted : kMaxBlocks);
  if (got_type == CompareType::kF32 && expected_type == CompareType::kF32) {
    compare_kernel<true>
        <<<blocks, kThreads, 0, stream>>>(got, got_type, expected, expected_type, n, rtol, atol, totals);
  } else {
    compare_kernel<false>
        <<<blocks, kThreads, 0, stream>>>(got, got_type, expected, expected_type, n, rtol, atol, totals);
  }
  return cudaGetLastError();
}

}  // namespace kiln::cuda
