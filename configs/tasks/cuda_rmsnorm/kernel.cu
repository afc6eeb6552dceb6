// Program 0 for cuda_rmsnorm: one block per row; each thread loads VEC halves at a time (VEC=8 is one
// 16-byte access), sums squares in fp32, the block reduces through warp shuffles, then the row is read
// again (from L2: a row is 16 KiB at H=8192) and scaled.
// BLOCK: threads per block (one row each). VEC: halves per load; the vector path needs H % VEC == 0 so
// that every row starts 2*VEC-byte aligned, other rows take the scalar path.
#include <cuda_fp16.h>

#include "kiln/kernel_abi.h"

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef VEC
#define VEC 8
#endif

// [EVOLVE_START]
template <int kVec>
struct alignas(2 * kVec) HalfPack {
  __half h[kVec];
};

template <int kBlock>
__device__ float block_sum(float v) {
  __shared__ float partial[kBlock / 32];
  __shared__ float total;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    float s = threadIdx.x < kBlock / 32 ? partial[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x == 0) total = s;
  }
  __syncthreads();
  return total;
}

template <int kBlock, int kVec>
__global__ void __launch_bounds__(kBlock) rmsnorm_kernel(const __half* __restrict__ x, const __half* __restrict__ w,
                                                         __half* __restrict__ y, long long cols, float eps) {
  const long long row = blockIdx.x;
  const __half* xr = x + row * cols;
  __half* yr = y + row * cols;
  float sum = 0.f;
  const bool vectorized = cols % kVec == 0;
  if (vectorized) {
    const long long packs = cols / kVec;
    const auto* xp = reinterpret_cast<const HalfPack<kVec>*>(xr);
    for (long long p = threadIdx.x; p < packs; p += kBlock) {
      const HalfPack<kVec> v = xp[p];
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const float f = __half2float(v.h[i]);
        sum += f * f;
      }
    }
  } else {
    for (long long c = threadIdx.x; c < cols; c += kBlock) {
      const float f = __half2float(xr[c]);
      sum += f * f;
    }
  }
  const float inv = rsqrtf(block_sum<kBlock>(sum) / static_cast<float>(cols) + eps);
  if (vectorized) {
    const long long packs = cols / kVec;
    const auto* xp = reinterpret_cast<const HalfPack<kVec>*>(xr);
    const auto* wp = reinterpret_cast<const HalfPack<kVec>*>(w);
    auto* yp = reinterpret_cast<HalfPack<kVec>*>(yr);
    for (long long p = threadIdx.x; p < packs; p += kBlock) {
      const HalfPack<kVec> v = xp[p];
      const HalfPack<kVec> s = wp[p];
      HalfPack<kVec> out;
#pragma unroll
      for (int i = 0; i < kVec; ++i) out.h[i] = __float2half(__half2float(v.h[i]) * inv * __half2float(s.h[i]));
      yp[p] = out;
    }
  } else {
    for (long long c = threadIdx.x; c < cols; c += kBlock) {
      yr[c] = __float2half(__half2float(xr[c]) * inv * __half2float(w[c]));
    }
  }
}
// [EVOLVE_END]

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 2 || args->n_outputs != 1) return 1;
  const long long rows = args->inputs[0].shape[0];
  const long long cols = args->inputs[0].shape[1];
  const float eps = static_cast<float>(kiln_scalar(args, "eps", 1e-6));
  if (rows == 0) return 0;
  rmsnorm_kernel<BLOCK, VEC><<<static_cast<unsigned>(rows), BLOCK, 0, static_cast<cudaStream_t>(args->stream)>>>(
      static_cast<const __half*>(args->inputs[0].data), static_cast<const __half*>(args->inputs[1].data),
      static_cast<__half*>(args->outputs[0].data), cols, eps);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
