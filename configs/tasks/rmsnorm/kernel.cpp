// Program 0 for rmsnorm: y[r,c] = x[r,c] / sqrt(mean(x[r,:]^2) + eps) * w[c].
// THREADS: OpenMP threads over rows. VEC: independent partial sums in the reduction; more of them let
// the compiler keep a whole SIMD register of sums instead of one serial chain.
#include <cmath>
#include <cstdint>

#include "kiln/kernel_abi.h"

#ifndef THREADS
#define THREADS 1
#endif
#ifndef VEC
#define VEC 1
#endif

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 2 || args->n_outputs != 1) return 1;
  const float* x = static_cast<const float*>(args->inputs[0].data);
  const float* w = static_cast<const float*>(args->inputs[1].data);
  float* y = static_cast<float*>(args->outputs[0].data);
  const int64_t rows = args->inputs[0].shape[0];
  const int64_t cols = args->inputs[0].shape[1];
  const float eps = static_cast<float>(kiln_scalar(args, "eps", 1e-6));
  // [EVOLVE_START]
#pragma omp parallel for num_threads(THREADS) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float acc[VEC] = {};
    int64_t c = 0;
    for (; c + VEC <= cols; c += VEC)
      for (int v = 0; v < VEC; ++v) acc[v] += xr[c + v] * xr[c + v];
    for (; c < cols; ++c) acc[0] += xr[c] * xr[c];
    float sum = 0.f;
    for (int v = 0; v < VEC; ++v) sum += acc[v];
    const float inv = 1.f / std::sqrt(sum / static_cast<float>(cols) + eps);
    for (c = 0; c < cols; ++c) yr[c] = xr[c] * inv * w[c];
  }
  // [EVOLVE_END]
  return 0;
}
