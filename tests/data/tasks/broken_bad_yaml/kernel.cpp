// Program 0 for the rmsnorm_cpu test task. The tuner varies UNROLL; proposers rewrite the region.
#include <cmath>
#include <cstdint>

#include "kiln/kernel_abi.h"

#ifndef UNROLL
#define UNROLL 1
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
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float acc[UNROLL] = {};
    int64_t c = 0;
    for (; c + UNROLL <= cols; c += UNROLL)
      for (int u = 0; u < UNROLL; ++u) acc[u] += xr[c + u] * xr[c + u];
    for (; c < cols; ++c) acc[0] += xr[c] * xr[c];
    float sum = 0.f;
    for (int u = 0; u < UNROLL; ++u) sum += acc[u];
    const float inv = 1.f / std::sqrt(sum / static_cast<float>(cols) + eps);
    for (c = 0; c < cols; ++c) yr[c] = xr[c] * inv * w[c];
  }
  // [EVOLVE_END]
  return 0;
}
