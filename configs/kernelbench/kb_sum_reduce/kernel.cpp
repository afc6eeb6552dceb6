// Program 0 for kb_sum_reduce: y[b, 0, j] = sum_i x[b, i, j] for x[batch, dim1, dim2], fp32.
// THREADS: OpenMP threads over batches (ROWWISE=0: over batches and columns).
// ROWWISE: 0 sums each column down x (a stride of dim2 floats between the terms); 1 adds whole rows of
//   x into y's row, contiguous and vectorized, the terms of each sum still in the order of i.
#include <cstdint>

#include "kiln/kernel_abi.h"

#ifndef THREADS
#define THREADS 1
#endif
#ifndef ROWWISE
#define ROWWISE 0
#endif

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 1 || args->n_outputs != 1) return 1;
  const float* x = static_cast<const float*>(args->inputs[0].data);
  float* y = static_cast<float*>(args->outputs[0].data);
  const int64_t batch = args->inputs[0].shape[0];
  const int64_t d1 = args->inputs[0].shape[1];
  const int64_t d2 = args->inputs[0].shape[2];
  // [EVOLVE_START]
#if ROWWISE
#pragma omp parallel for num_threads(THREADS) schedule(static)
  for (int64_t b = 0; b < batch; ++b) {
    const float* xb = x + b * d1 * d2;
    float* yb = y + b * d2;
    for (int64_t j = 0; j < d2; ++j) yb[j] = 0.f;
    for (int64_t i = 0; i < d1; ++i) {
      const float* row = xb + i * d2;
      for (int64_t j = 0; j < d2; ++j) yb[j] += row[j];
    }
  }
#else
#pragma omp parallel for collapse(2) num_threads(THREADS) schedule(static)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < d2; ++j) {
      float s = 0.f;
      for (int64_t i = 0; i < d1; ++i) s += x[(b * d1 + i) * d2 + j];
      y[b * d2 + j] = s;
    }
  }
#endif
  // [EVOLVE_END]
  return 0;
}
