// Program 0 for cuda_sgemm. Each block computes a BM x BN tile of C and walks K in slices of BK that a
// STAGES-deep cp.async pipeline stages in shared memory (A stored transposed, so that a thread reads its
// rows as float4). The block's warps split the tile into warp tiles of (4 TM) x (8 TN); a warp's 32 threads
// form a 4 x 8 grid, and each thread accumulates TM x TN outputs in registers as 4x4 outer products of
// float4 fragments spread over the warp tile (no bank conflicts on the fragment reads).
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
#define TM 16
#endif
#ifndef TN
#define TN 8
#endif
#ifndef STAGES
#define STAGES 3
#endif

// [EVOLVE_START]
// Asynchronous global -> shared copies (sm_80+); a plain copy elsewhere, which the waits then need not wait for.
// A copy whose `ok` is false writes zeros and reads nothing.
__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool ok) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(ok ? 4 : 0));
#else
  *dst = ok ? *src : 0.f;
#endif
}

__device__ __forceinline__ void cp_async16(float* dst, const float* src, bool ok) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(ok ? 16 : 0));
#else
  for (int i = 0; i < 4; ++i) dst[i] = ok ? src[i] : 0.f;
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

// The shape of one instantiation. Values that cannot work are rounded to ones that do (a thread tile of
// whole float4s, at least one warp each way), so that every parameter combination builds and is correct.
template <int kBMp, int kBNp, int kBKp, int kTMp, int kTNp, int kStagesp>
struct SgemmShape {
  static constexpr int kTM = kTMp < 4 ? 4 : kTMp / 4 * 4;
  static constexpr int kTN = kTNp < 4 ? 4 : kTNp / 4 * 4;
  static constexpr int kBK = kBKp < 8 ? 8 : kBKp / 8 * 8;  // the A copy walks K in runs of 8
  static constexpr int kStages = kStagesp < 2 ? 2 : kStagesp;
  static constexpr int kWarpM = 4 * kTM, kWarpN = 8 * kTN;  // a warp is 4 x 8 threads
  static constexpr int kWarpsM = kBMp / kWarpM < 1 ? 1 : kBMp / kWarpM;
  static constexpr int kWarpsN = kBNp / kWarpN < 1 ? 1 : kBNp / kWarpN;
  static constexpr int kBM = kWarpsM * kWarpM, kBN = kWarpsN * kWarpN;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  // Few accumulators: ask for two 256-thread blocks per SM (<= 128 registers); many: let them have 255.
  static constexpr int kMinBlocks = kTM * kTN >= 128 || kThreads >= 512 ? 1 : 512 / kThreads;
  static constexpr int kLdA = kBM + 4;  // the padding spreads the transposing 4-byte copies over the banks
  static constexpr int kStageA = kBK * kLdA, kStageB = kBK * kBN;
  static constexpr int kSmemBytes = kStages * (kStageA + kStageB) * static_cast<int>(sizeof(float));
};

// A's slice (BM x BK) into as[kk][r]: 8 threads copy 8 consecutive k of a row (one 32-byte sector), the
// block kThreads / 8 rows at a time. kFull: the slice is inside A (no bound checks).
template <class S, bool kFull>
__device__ __forceinline__ void sgemm_load_a(const float* __restrict__ a, float* as, int row0, int k0, int m, int k) {
  const int tid = static_cast<int>(threadIdx.x);
  if constexpr (S::kThreads % 8 == 0 && S::kBM % (S::kThreads / 8) == 0) {
    constexpr int kRows = S::kThreads / 8, kPasses = S::kBM / kRows;
    const int r0 = tid / 8, kk0 = tid % 8;
    const long long first = static_cast<long long>(row0 + r0) * k + k0 + kk0,
                    stride = static_cast<long long>(kRows) * k;
    float* dst = as + kk0 * S::kLdA + r0;
#pragma unroll
    for (int h = 0; h < S::kBK / 8; ++h) {
#pragma unroll
      for (int p = 0; p < kPasses; ++p) {
        const long long off = first + p * stride + h * 8;
        const bool ok = kFull || (row0 + r0 + p * kRows < m && k0 + kk0 + h * 8 < k);
        cp_async4(dst + h * 8 * S::kLdA + p * kRows, ok ? a + off : a, ok);
      }
    }
  } else {  // any other shape: element by element
    constexpr int kA = S::kBM * S::kBK;
#pragma unroll 4
    for (int i = 0; i < (kA + S::kThreads - 1) / S::kThreads; ++i) {
      const int e = tid + i * S::kThreads;
      if (kA % S::kThreads == 0 || e < kA) {
        const int kk = e % 8 + e / (8 * S::kBM) * 8, r = e / 8 % S::kBM;
        const bool ok = row0 + r < m && k0 + kk < k;
        cp_async4(as + kk * S::kLdA + r, ok ? a + static_cast<long long>(row0 + r) * k + k0 + kk : a, ok);
      }
    }
  }
}

// B's slice (BK x BN) into bs[kk][c]: float4 copies when B's rows are 16-byte aligned (vec_b: n % 4 == 0, so a
// float4 is all inside or all outside), the block kThreads / (BN / 4) rows at a time; else element by element.
template <class S, bool kFull>
__device__ __forceinline__ void sgemm_load_b(const float* __restrict__ b, float* bs, int col0, int k0, int n, int k,
                                             bool vec_b) {
  const int tid = static_cast<int>(threadIdx.x);
  constexpr int kRow4 = S::kBN / 4;
  if constexpr (S::kThreads % kRow4 == 0) {
    if (vec_b) {
      constexpr int kRows = S::kThreads / kRow4, kPasses = (S::kBK + kRows - 1) / kRows;
      const int kk0 = tid / kRow4, cc = tid % kRow4 * 4;
      const long long first = static_cast<long long>(k0 + kk0) * n + col0 + cc,
                      stride = static_cast<long long>(kRows) * n;
#pragma unroll
      for (int p = 0; p < kPasses; ++p) {
        if (S::kBK % kRows == 0 || kk0 + p * kRows < S::kBK) {
          const bool ok = kFull || (k0 + kk0 + p * kRows < k && col0 + cc < n);
          cp_async16(bs + (kk0 + p * kRows) * S::kBN + cc, ok ? b + first + p * stride : b, ok);
        }
      }
      return;
    }
  }
  if (vec_b) {  // float4 copies, any shape
    constexpr int kB4 = S::kBK * kRow4;
#pragma unroll 4
    for (int i = 0; i < (kB4 + S::kThreads - 1) / S::kThreads; ++i) {
      const int e = tid + i * S::kThreads;
      if (kB4 % S::kThreads == 0 || e < kB4) {
        const int kk = e / kRow4, cc = e % kRow4 * 4;
        const bool ok = k0 + kk < k && col0 + cc < n;
        cp_async16(bs + kk * S::kBN + cc, ok ? b + static_cast<long long>(k0 + kk) * n + col0 + cc : b, ok);
      }
    }
    return;
  }
  constexpr int kB = S::kBK * S::kBN;
#pragma unroll 4
  for (int i = 0; i < (kB + S::kThreads - 1) / S::kThreads; ++i) {
    const int e = tid + i * S::kThreads;
    if (kB % S::kThreads == 0 || e < kB) {
      const int kk = e / S::kBN, cc = e % S::kBN;
      const bool ok = k0 + kk < k && col0 + cc < n;
      cp_async4(bs + kk * S::kBN + cc, ok ? b + static_cast<long long>(k0 + kk) * n + col0 + cc : b, ok);
    }
  }
}

// One slice of K into one stage; slices wholly inside A and B skip the bound checks.
template <class S>
__device__ __forceinline__ void sgemm_load_tile(const float* __restrict__ a, const float* __restrict__ b, float* as,
                                                float* bs, int row0, int col0, int k0, int m, int n, int k, bool vec_b,
                                                bool block_inside) {
  if (block_inside && k0 + S::kBK <= k) {
    sgemm_load_a<S, true>(a, as, row0, k0, m, k);
    sgemm_load_b<S, true>(b, bs, col0, k0, n, k, vec_b);
  } else {
    sgemm_load_a<S, false>(a, as, row0, k0, m, k);
    sgemm_load_b<S, false>(b, bs, col0, k0, n, k, vec_b);
  }
}

// One staged slice: per k, TM/4 float4 of A and TN/4 float4 of B from shared memory, TM x TN FMAs.
template <class S>
__device__ __forceinline__ void sgemm_compute_tile(const float* as, const float* bs, float (&acc)[S::kTM][S::kTN]) {
#pragma unroll
  for (int kk = 0; kk < S::kBK; ++kk) {
    float4 af[S::kTM / 4], bf[S::kTN / 4];
#pragma unroll
    for (int i = 0; i < S::kTM / 4; ++i) af[i] = *reinterpret_cast<const float4*>(as + kk * S::kLdA + i * 16);
#pragma unroll
    for (int j = 0; j < S::kTN / 4; ++j) bf[j] = *reinterpret_cast<const float4*>(bs + kk * S::kBN + j * 32);
#pragma unroll
    for (int i = 0; i < S::kTM / 4; ++i) {
      const float ar[4] = {af[i].x, af[i].y, af[i].z, af[i].w};
#pragma unroll
      for (int j = 0; j < S::kTN / 4; ++j) {
        const float br[4] = {bf[j].x, bf[j].y, bf[j].z, bf[j].w};
#pragma unroll
        for (int ii = 0; ii < 4; ++ii) {
#pragma unroll
          for (int jj = 0; jj < 4; ++jj)
            acc[i * 4 + ii][j * 4 + jj] = fmaf(ar[ii], br[jj], acc[i * 4 + ii][j * 4 + jj]);
        }
      }
    }
  }
}

template <class S>
__device__ __forceinline__ void sgemm_store(float* __restrict__ c, const float (&acc)[S::kTM][S::kTN], int row, int col,
                                            int m, int n, bool vec_c) {
  // This thread's rows are row + 16 i + ii, its columns col + 32 j + jj (i, j: float4 groups; ii, jj < 4).
#pragma unroll
  for (int i = 0; i < S::kTM / 4; ++i) {
#pragma unroll
    for (int ii = 0; ii < 4; ++ii) {
      const int r = row + i * 16 + ii;
      if (r >= m) continue;
      float* out = c + static_cast<long long>(r) * n;
#pragma unroll
      for (int j = 0; j < S::kTN / 4; ++j) {
        const int cc = col + j * 32;
        const float* v = acc[i * 4 + ii];
        if (vec_c) {
          if (cc < n)
            *reinterpret_cast<float4*>(out + cc) = make_float4(v[j * 4], v[j * 4 + 1], v[j * 4 + 2], v[j * 4 + 3]);
        } else {
#pragma unroll
          for (int jj = 0; jj < 4; ++jj)
            if (cc + jj < n) out[cc + jj] = v[j * 4 + jj];
        }
      }
    }
  }
}

// The block's dynamic shared memory. Declared in a namespace so that its symbol is mangled, as it is when the
// file is compiled inside another namespace (a batch of variants): the PTX is then the same either way.
namespace sgemm_shared {
__device__ __forceinline__ float* base() {
  extern __shared__ float4 sgemm_smem[];
  return reinterpret_cast<float*>(sgemm_smem);
}
}  // namespace sgemm_shared

template <class S>
__global__ void __launch_bounds__(S::kThreads, S::kMinBlocks)
    sgemm_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int m, int n, int k,
                 bool vec_b, bool vec_c) {
  float* as = sgemm_shared::base();          // [STAGES][BK][BM + 4]
  float* bs = as + S::kStages * S::kStageA;  // [STAGES][BK][BN]
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int wm = warp / S::kWarpsN, wn = warp % S::kWarpsN;
  const int tm = lane / 8, tn = lane % 8;
  const int row0 = static_cast<int>(blockIdx.y) * S::kBM, col0 = static_cast<int>(blockIdx.x) * S::kBN;
  const int frag_a = wm * S::kWarpM + tm * 4, frag_b = wn * S::kWarpN + tn * 4;
  const int tiles = (k + S::kBK - 1) / S::kBK;
  const bool inside = row0 + S::kBM <= m && col0 + S::kBN <= n;

  // Tile t lives in stage t % STAGES; STAGES - 1 tiles are in flight while one is computed.
#pragma unroll
  for (int s = 0; s < S::kStages - 1; ++s) {
    if (s < tiles)
      sgemm_load_tile<S>(a, b, as + s * S::kStageA, bs + s * S::kStageB, row0, col0, s * S::kBK, m, n, k, vec_b,
                         inside);
    cp_async_commit();
  }
  float acc[S::kTM][S::kTN];
#pragma unroll
  for (int i = 0; i < S::kTM; ++i) {
#pragma unroll
    for (int j = 0; j < S::kTN; ++j) acc[i][j] = 0.f;
  }
  int read = 0, write = S::kStages - 1;  // the stages of tile t and of tile t + STAGES - 1
  for (int t = 0; t < tiles; ++t) {
    cp_async_wait<S::kStages - 2>();  // this thread's copies of tile t have landed
    __syncthreads();                  // everyone's have, and nobody still reads the stage refilled below
    const int next = t + S::kStages - 1;
    if (next < tiles)
      sgemm_load_tile<S>(a, b, as + write * S::kStageA, bs + write * S::kStageB, row0, col0, next * S::kBK, m, n, k,
                         vec_b, inside);
    cp_async_commit();  // an empty group at the end keeps the count that the wait relies on
    sgemm_compute_tile<S>(as + read * S::kStageA + frag_a, bs + read * S::kStageB + frag_b, acc);
    read = read + 1 == S::kStages ? 0 : read + 1;
    write = write + 1 == S::kStages ? 0 : write + 1;
  }
  sgemm_store<S>(c, acc, row0 + frag_a, col0 + frag_b, m, n, vec_c);
}

template <int kBMp, int kBNp, int kBKp, int kTMp, int kTNp, int kStagesp>
int sgemm_launch(const float* a, const float* b, float* c, int m, int n, int k, cudaStream_t stream) {
  using S = SgemmShape<kBMp, kBNp, kBKp, kTMp, kTNp, kStagesp>;
  auto* kernel = sgemm_kernel<S>;
  const int smem = S::kSmemBytes;
  if (smem > 48 * 1024 &&
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess)
    return 2;
  const bool vec_b = n % 4 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0;
  const bool vec_c = n % 4 == 0 && reinterpret_cast<uintptr_t>(c) % 16 == 0;
  const dim3 grid((n + S::kBN - 1) / S::kBN, (m + S::kBM - 1) / S::kBM);
  kernel<<<grid, S::kThreads, smem, stream>>>(a, b, c, m, n, k, vec_b, vec_c);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
// [EVOLVE_END]

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 2 || args->n_outputs != 1) return 1;
  const int m = static_cast<int>(args->inputs[0].shape[0]);
  const int k = static_cast<int>(args->inputs[0].shape[1]);
  const int n = static_cast<int>(args->inputs[1].shape[1]);
  if (m == 0 || n == 0) return 0;
  return sgemm_launch<BM, BN, BK, TM, TN, STAGES>(
      static_cast<const float*>(args->inputs[0].data), static_cast<const float*>(args->inputs[1].data),
      static_cast<float*>(args->outputs[0].data), m, n, k, static_cast<cudaStream_t>(args->stream));
}
