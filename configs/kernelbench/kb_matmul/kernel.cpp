// Program 0 for kb_matmul: C[M, N] = A[M, K] @ B[K, N], fp32, row-major.
// THREADS: OpenMP threads over rows of C.
// IKJ: 0 computes each C[i, j] as a dot product (B read down a column, a stride of N floats); 1 runs
//   i-k-j, C's row i accumulating a * B's row k, so the innermost loop is contiguous and vectorizes.
// TILE_K, TILE_N (IKJ=1 only): the block of B (TILE_K rows by TILE_N columns) reused from cache for a row.
#include <cstdint>

#include "kiln/kernel_abi.h"

#ifndef THREADS
#define THREADS 1
#endif
#ifndef IKJ
#define IKJ 0
#endif
#ifndef TILE_K
#define TILE_K 128
#endif
#ifndef TILE_N
#define TILE_N 256
#endif

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 2 || args->n_outputs != 1) return 1;
  const float* A = static_cast<const float*>(args->inputs[0].data);
  const float* B = static_cast<const float*>(args->inputs[1].data);
  float* C = static_cast<float*>(args->outputs[0].data);
  const int64_t M = args->inputs[0].shape[0];
  const int64_t K = args->inputs[0].shape[1];
  const int64_t N = args->inputs[1].shape[1];
  // [EVOLVE_START]
#if IKJ
#pragma omp parallel for num_threads(THREADS) schedule(static)
  for (int64_t i = 0; i < M; ++i) {
    float* c = C + i * N;
    for (int64_t j = 0; j < N; ++j) c[j] = 0.f;
    for (int64_t k0 = 0; k0 < K; k0 += TILE_K) {
      const int64_t k1 = k0 + TILE_K < K ? k0 + TILE_K : K;
      for (int64_t j0 = 0; j0 < N; j0 += TILE_N) {
        const int64_t j1 = j0 + TILE_N < N ? j0 + TILE_N : N;
        for (int64_t k = k0; k < k1; ++k) {
          const float a = A[i * K + k];
          const float* b = B + k * N;
          for (int64_t j = j0; j < j1; ++j) c[j] += a * b[j];
        }
      }
    }
  }
#else
#pragma omp parallel for num_threads(THREADS) schedule(static)
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      float s = 0.f;
      for (int64_t k = 0; k < K; ++k) s += A[i * K + k] * B[k * N + j];
      C[i * N + j] = s;
    }
  }
#endif
  // [EVOLVE_END]
  return 0;
}
