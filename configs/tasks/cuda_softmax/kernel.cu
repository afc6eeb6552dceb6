// Program 0 for cuda_softmax: one block per row, an online max-and-sum in one pass over x (each thread
// keeps its running max m and sum s of exp(x - m)), a block reduction of (m, s) pairs, then a second
// pass that writes exp(x - m) / s (the row is 32 KiB at cols=8192 and is read again from L2).
// With ROW_IN_SMEM=1 (rows up to 48 KiB) the row is instead staged in shared memory: x is read from DRAM
// exactly once, each exponential computed once and kept, and no running max needs rescaling.
// BLOCK: threads per block. VEC: floats per load (4 = one 16-byte access); the vector path needs
// cols % VEC == 0 so that every row is aligned, other shapes take the scalar path.
#include "kiln/kernel_abi.h"

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef VEC
#define VEC 4
#endif
#ifndef ROW_IN_SMEM
#define ROW_IN_SMEM 1
#endif

// [EVOLVE_START]
template <int kVec>
struct alignas(4 * kVec) FloatPack {
  float f[kVec];
};

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  if (mm == -INFINITY) return;  // both empty
  s = s * __expf(m - mm) + s2 * __expf(m2 - mm);
  m = mm;
}

template <int kBlock>
__device__ void block_max_sum(float& m, float& s) {
  __shared__ float pm[kBlock / 32], ps[kBlock / 32];
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    merge(m, s, m2, s2);
  }
  if ((threadIdx.x & 31) == 0) {
    pm[threadIdx.x >> 5] = m;
    ps[threadIdx.x >> 5] = s;
  }
  __syncthreads();
  m = -INFINITY;
  s = 0.f;
  for (int i = 0; i < kBlock / 32; ++i) merge(m, s, pm[i], ps[i]);
}

template <int kBlock, int kVec>
__global__ void __launch_bounds__(kBlock) softmax_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                         long long cols) {
  const float* xr = x + blockIdx.x * cols;
  float* yr = y + blockIdx.x * cols;
  float m = -INFINITY, s = 0.f;
  const bool vectorized = cols % kVec == 0;
  if (vectorized) {
    const auto* xp = reinterpret_cast<const FloatPack<kVec>*>(xr);
    for (long long p = threadIdx.x; p < cols / kVec; p += kBlock) {
      const FloatPack<kVec> v = xp[p];
#pragma unroll
      for (int i = 0; i < kVec; ++i) merge(m, s, v.f[i], 1.f);
    }
  } else {
    for (long long c = threadIdx.x; c < cols; c += kBlock) merge(m, s, xr[c], 1.f);
  }
  block_max_sum<kBlock>(m, s);
  const float inv = 1.f / s;
  if (vectorized) {
    const auto* xp = reinterpret_cast<const FloatPack<kVec>*>(xr);
    auto* yp = reinterpret_cast<FloatPack<kVec>*>(yr);
    for (long long p = threadIdx.x; p < cols / kVec; p += kBlock) {
      FloatPack<kVec> v = xp[p];
#pragma unroll
      for (int i = 0; i < kVec; ++i) v.f[i] = expf(v.f[i] - m) * inv;
      yp[p] = v;
    }
  } else {
    for (long long c = threadIdx.x; c < cols; c += kBlock) yr[c] = expf(xr[c] - m) * inv;
  }
}
template <int kBlock, bool kMax>
__device__ float block_reduce(float v) {
  __shared__ float partial[kBlock / 32];
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = partial[0];
  for (int i = 1; i < kBlock / 32; ++i) r = kMax ? fmaxf(r, partial[i]) : r + partial[i];
  __syncthreads();  // the next reduction reuses `partial`
  return r;
}

// Each thread touches the same elements of the staged row in every pass, so the passes need no barrier
// of their own (the reductions between them have one).
template <int kBlock, int kVec>
__global__ void __launch_bounds__(kBlock) softmax_smem_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                              long long cols) {
  extern __shared__ float4 staged[];
  float* row = reinterpret_cast<float*>(staged);
  const float* xr = x + blockIdx.x * cols;
  float* yr = y + blockIdx.x * cols;
  const bool vectorized = cols % kVec == 0;
  const long long packs = vectorized ? cols / kVec : 0;
  auto* rp = reinterpret_cast<FloatPack<kVec>*>(row);
  float m = -INFINITY;
  if (vectorized) {
    const auto* xp = reinterpret_cast<const FloatPack<kVec>*>(xr);
    for (long long p = threadIdx.x; p < packs; p += kBlock) {
      const FloatPack<kVec> v = xp[p];
      rp[p] = v;
#pragma unroll
      for (int i = 0; i < kVec; ++i) m = fmaxf(m, v.f[i]);
    }
  } else {
    for (long long c = threadIdx.x; c < cols; c += kBlock) {
      row[c] = xr[c];
      m = fmaxf(m, row[c]);
    }
  }
  m = block_reduce<kBlock, true>(m);
  float s = 0.f;
  if (vectorized) {
    for (long long p = threadIdx.x; p < packs; p += kBlock) {
      FloatPack<kVec> v = rp[p];
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        v.f[i] = expf(v.f[i] - m);
        s += v.f[i];
      }
      rp[p] = v;
    }
  } else {
    for (long long c = threadIdx.x; c < cols; c += kBlock) {
      row[c] = expf(row[c] - m);
      s += row[c];
    }
  }
  const float inv = 1.f / block_reduce<kBlock, false>(s);
  if (vectorized) {
    auto* yp = reinterpret_cast<FloatPack<kVec>*>(yr);
    for (long long p = threadIdx.x; p < packs; p += kBlock) {
      FloatPack<kVec> v = rp[p];
#pragma unroll
      for (int i = 0; i < kVec; ++i) v.f[i] *= inv;
      yp[p] = v;
    }
  } else {
    for (long long c = threadIdx.x; c < cols; c += kBlock) yr[c] = row[c] * inv;
  }
}
// [EVOLVE_END]

// Rows that fit the default dynamic shared-memory limit are staged; longer ones take the online kernel.
constexpr long long kMaxStagedBytes = 48 * 1024;

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 1 || args->n_outputs != 1) return 1;
  const long long rows = args->inputs[0].shape[0];
  const long long cols = args->inputs[0].shape[1];
  if (rows == 0) return 0;
  const auto stream = static_cast<cudaStream_t>(args->stream);
  const auto* x = static_cast<const float*>(args->inputs[0].data);
  auto* y = static_cast<float*>(args->outputs[0].data);
  const long long staged_bytes = cols * static_cast<long long>(sizeof(float));
  if (ROW_IN_SMEM && staged_bytes <= kMaxStagedBytes) {
    softmax_smem_kernel<BLOCK, VEC><<<static_cast<unsigned>(rows), BLOCK, staged_bytes, stream>>>(x, y, cols);
  } else {
    softmax_kernel<BLOCK, VEC><<<static_cast<unsigned>(rows), BLOCK, 0, stream>>>(x, y, cols);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
