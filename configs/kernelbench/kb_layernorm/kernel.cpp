// Program 0 for kb_layernorm: every row of x (the last dimension, `hidden`) becomes
// (x - mean) / sqrt(var + 1e-5) * weight + bias, var the biased variance, fp32.
// THREADS: OpenMP threads over rows. VEC: independent partial sums in the reductions (breaks the
// dependency chain so they vectorize). FUSED_STATS: 1 takes the sum and the sum of squares in one pass
// (accumulated in double so the difference E[x^2] - E[x]^2 keeps its precision) instead of two.
#include <cmath>
#include <cstdint>

#include "kiln/kernel_abi.h"

#ifndef THREADS
#define THREADS 1
#endif
#ifndef VEC
#define VEC 1
#endif
#ifndef FUSED_STATS
#define FUSED_STATS 0
#endif

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 3 || args->n_outputs != 1) return 1;
  const float* x = static_cast<const float*>(args->inputs[0].data);
  const float* w = static_cast<const float*>(args->inputs[1].data);
  const float* b = static_cast<const float*>(args->inputs[2].data);
  float* y = static_cast<float*>(args->outputs[0].data);
  const int64_t h = args->inputs[0].shape[2];
  const int64_t rows = args->inputs[0].shape[0] * args->inputs[0].shape[1];
  // [EVOLVE_START]
#pragma omp parallel for num_threads(THREADS) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * h;
    float* yr = y + r * h;
    int64_t c = 0;
#if FUSED_STATS
    double s[VEC] = {}, q[VEC] = {};
    for (; c + VEC <= h; c += VEC)
      for (int v = 0; v < VEC; ++v) {
        s[v] += xr[c + v];
        q[v] += static_cast<double>(xr[c + v]) * xr[c + v];
      }
    for (; c < h; ++c) {
      s[0] += xr[c];
      q[0] += static_cast<double>(xr[c]) * xr[c];
    }
    double sum = 0, sq = 0;
    for (int v = 0; v < VEC; ++v) {
      sum += s[v];
      sq += q[v];
    }
    const double mean_d = sum / h;
    double var_d = sq / h - mean_d * mean_d;
    var_d = var_d < 0 ? 0 : var_d;
    const float mean = static_cast<float>(mean_d);
    const float var = static_cast<float>(var_d);
#else
    float s[VEC] = {};
    for (; c + VEC <= h; c += VEC)
      for (int v = 0; v < VEC; ++v) s[v] += xr[c + v];
    for (; c < h; ++c) s[0] += xr[c];
    float sum = 0.f;
    for (int v = 0; v < VEC; ++v) sum += s[v];
    const float mean = sum / h;
    float q[VEC] = {};
    for (c = 0; c + VEC <= h; c += VEC)
      for (int v = 0; v < VEC; ++v) q[v] += (xr[c + v] - mean) * (xr[c + v] - mean);
    for (; c < h; ++c) q[0] += (xr[c] - mean) * (xr[c] - mean);
    float sq = 0.f;
    for (int v = 0; v < VEC; ++v) sq += q[v];
    const float var = sq / h;
#endif
    const float inv = 1.f / std::sqrt(var + 1e-5f);
    for (c = 0; c < h; ++c) yr[c] = (xr[c] - mean) * inv * w[c] + b[c];
  }
  // [EVOLVE_END]
  return 0;
}
