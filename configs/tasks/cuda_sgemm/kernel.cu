// Program 0 for cuda_sgemm: each block computes a BM x BN tile of C, stepping over K in slices of BK that
// are staged in shared memory (A stored transposed, so a thread reads its TM rows as one contiguous run);
// each thread accumulates a TM x TN sub-tile in registers. (BM/TM) * (BN/TN) threads per block.
#include "kiln/kernel_abi.h"

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 8
#endif
#ifndef TM
#define TM 8
#endif
#ifndef TN
#define TN 8
#endif

// [EVOLVE_START]
template <int kBM, int kBN, int kBK, int kTM, int kTN>
__global__ void __launch_bounds__((kBM / kTM) * (kBN / kTN)) sgemm_kernel(const float* __restrict__ a,
                                                                        const float* __restrict__ b,
                                                                        float* __restrict__ c, int m, int n, int k) {
  constexpr int kThreadsX = kBN / kTN;
  constexpr int kThreads = (kBM / kTM) * kThreadsX;
  __shared__ float as[kBK][kBM + 4];
  __shared__ float bs[kBK][kBN + 4];
  const int tx = threadIdx.x % kThreadsX, ty = threadIdx.x / kThreadsX;
  const int row0 = blockIdx.y * kBM, col0 = blockIdx.x * kBN;
  float acc[kTM][kTN] = {};
  for (int k0 = 0; k0 < k; k0 += kBK) {
    for (int i = threadIdx.x; i < kBM * kBK; i += kThreads) {
      const int r = i / kBK, kk = i % kBK;
      const int gr = row0 + r, gk = k0 + kk;
      as[kk][r] = gr < m && gk < k ? a[static_cast<long long>(gr) * k + gk] : 0.f;
    }
    for (int i = threadIdx.x; i < kBK * kBN; i += kThreads) {
      const int kk = i / kBN, cc = i % kBN;
      const int gk = k0 + kk, gc = col0 + cc;
      bs[kk][cc] = gk < k && gc < n ? b[static_cast<long long>(gk) * n + gc] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      float ar[kTM], br[kTN];
#pragma unroll
      for (int i = 0; i < kTM; ++i) ar[i] = as[kk][ty * kTM + i];
#pragma unroll
      for (int j = 0; j < kTN; ++j) br[j] = bs[kk][tx * kTN + j];
#pragma unroll
      for (int i = 0; i < kTM; ++i) {
#pragma unroll
        for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(ar[i], br[j], acc[i][j]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    const int r = row0 + ty * kTM + i;
    if (r >= m) continue;
#pragma unroll
    for (int j = 0; j < kTN; ++j) {
      const int col = col0 + tx * kTN + j;
      if (col < n) c[static_cast<long long>(r) * n + col] = acc[i][j];
    }
  }
}
// [EVOLVE_END]

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 2 || args->n_outputs != 1) return 1;
  const int m = static_cast<int>(args->inputs[0].shape[0]);
  const int k = static_cast<int>(args->inputs[0].shape[1]);
  const int n = static_cast<int>(args->inputs[1].shape[1]);
  if (m == 0 || n == 0) return 0;
  const dim3 grid((n + BN - 1) / BN, (m + BM - 1) / BM);
  constexpr int threads = (BM / TM) * (BN / TN);
  sgemm_kernel<BM, BN, BK, TM, TN><<<grid, threads, 0, static_cast<cudaStream_t>(args->stream)>>>(
      static_cast<const float*>(args->inputs[0].data), static_cast<const float*>(args->inputs[1].data),
      static_cast<float*>(args->outputs[0].data), m, n, k);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
