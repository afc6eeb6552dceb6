// Program 0 for kb_softmax: each row of x[batch_size, dim] becomes exp(x - max) / sum(exp(x - max)), fp32.
// THREADS: OpenMP threads over rows. VEC: independent partial results in the max and sum reductions.
// STORE_EXP: 1 keeps exp(x - max) in y during the sum pass and only scales it afterwards (one exp per
// element instead of two).
#include <cmath>
#include <cstdint>

#include "kiln/kernel_abi.h"

#ifndef THREADS
#define THREADS 1
#endif
#ifndef VEC
#define VEC 1
#endif
#ifndef STORE_EXP
#define STORE_EXP 0
#endif

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 1 || args->n_outputs != 1) return 1;
  const float* x = static_cast<const float*>(args->inputs[0].data);
  float* y = static_cast<float*>(args->outputs[0].data);
  const int64_t rows = args->inputs[0].shape[0];
  const int64_t cols = args->inputs[0].shape[1];
  // [EVOLVE_START]
#pragma omp parallel for num_threads(THREADS) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float mx[VEC];
    for (int v = 0; v < VEC; ++v) mx[v] = xr[0];
    int64_t c = 0;
    for (; c + VEC <= cols; c += VEC)
      for (int v = 0; v < VEC; ++v) mx[v] = xr[c + v] > mx[v] ? xr[c + v] : mx[v];
    for (; c < cols; ++c) mx[0] = xr[c] > mx[0] ? xr[c] : mx[0];
    float max = mx[0];
    for (int v = 1; v < VEC; ++v) max = mx[v] > max ? mx[v] : max;

    float acc[VEC] = {};
    for (c = 0; c + VEC <= cols; c += VEC) {
      for (int v = 0; v < VEC; ++v) {
        const float e = std::exp(xr[c + v] - max);
        if (STORE_EXP) yr[c + v] = e;
        acc[v] += e;
      }
    }
    for (; c < cols; ++c) {
      const float e = std::exp(xr[c] - max);
      if (STORE_EXP) yr[c] = e;
      acc[0] += e;
    }
    float sum = 0.f;
    for (int v = 0; v < VEC; ++v) sum += acc[v];
    const float inv = 1.f / sum;
    if (STORE_EXP) {
      for (c = 0; c < cols; ++c) yr[c] *= inv;
    } else {
      for (c = 0; c < cols; ++c) yr[c] = std::exp(xr[c] - max) * inv;
    }
  }
  // [EVOLVE_END]
  return 0;
}
