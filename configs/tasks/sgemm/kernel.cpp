// Program 0 for sgemm: C[M, N] = A[M, K] * B[K, N], all row-major.
// THREADS: OpenMP threads over row tiles. TILE_M x TILE_N x TILE_K: the block of C and the slice of K
// worked on at once, so that the rows of B it touches stay in cache. The innermost loop runs along a row
// of B and C, which the compiler turns into SIMD.
#include <cstdint>

#include "kiln/kernel_abi.h"

#ifndef THREADS
#define THREADS 1
#endif
#ifndef TILE_M
#define TILE_M 4
#endif
#ifndef TILE_N
#define TILE_N 16
#endif
#ifndef TILE_K
#define TILE_K 16
#endif

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 2 || args->n_outputs != 1) return 1;
  const float* a = static_cast<const float*>(args->inputs[0].data);
  const float* b = static_cast<const float*>(args->inputs[1].data);
  float* c = static_cast<float*>(args->outputs[0].data);
  const int64_t m = args->inputs[0].shape[0];
  const int64_t k = args->inputs[0].shape[1];
  const int64_t n = args->inputs[1].shape[1];
  // [EVOLVE_START]
#pragma omp parallel for num_threads(THREADS) schedule(static)
  for (int64_t i0 = 0; i0 < m; i0 += TILE_M) {
    const int64_t i1 = i0 + TILE_M < m ? i0 + TILE_M : m;
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * n + j] = 0.f;
    for (int64_t j0 = 0; j0 < n; j0 += TILE_N) {
      const int64_t j1 = j0 + TILE_N < n ? j0 + TILE_N : n;
      for (int64_t p0 = 0; p0 < k; p0 += TILE_K) {
        const int64_t p1 = p0 + TILE_K < k ? p0 + TILE_K : k;
        for (int64_t i = i0; i < i1; ++i) {
          float* ci = c + i * n;
          for (int64_t p = p0; p < p1; ++p) {
            const float aip = a[i * k + p];
            const float* bp = b + p * n;
            for (int64_t j = j0; j < j1; ++j) ci[j] += aip * bp[j];
          }
        }
      }
    }
  }
  // [EVOLVE_END]
  return 0;
}
