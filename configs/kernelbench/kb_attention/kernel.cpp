// Program 0 for kb_attention: out[b, h, i, :] = sum_j softmax_j(Q[b, h, i, :] . K[b, h, j, :] / sqrt(D)) V[b, h, j, :]
// for Q, K, V, out of shape [B, H, S, D], fp32, no mask.
// THREADS: OpenMP threads over the B * H * S query rows.
// VEC: independent partial sums in each dot product of Q's row with K's (breaks the dependency chain).
// AXPY: 0 computes each output element as a sum down V's column (a stride of D floats); 1 adds
//   p_j * V's row j into the output row, contiguous and vectorized.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/kernel_abi.h"

#ifndef THREADS
#define THREADS 1
#endif
#ifndef VEC
#define VEC 1
#endif
#ifndef AXPY
#define AXPY 0
#endif

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 3 || args->n_outputs != 1) return 1;
  const float* Q = static_cast<const float*>(args->inputs[0].data);
  const float* K = static_cast<const float*>(args->inputs[1].data);
  const float* V = static_cast<const float*>(args->inputs[2].data);
  float* out = static_cast<float*>(args->outputs[0].data);
  const int64_t BH = args->inputs[0].shape[0] * args->inputs[0].shape[1];
  const int64_t S = args->inputs[0].shape[2];
  const int64_t D = args->inputs[0].shape[3];
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  // [EVOLVE_START]
#pragma omp parallel num_threads(THREADS)
  {
    std::vector<float> p(static_cast<std::size_t>(S));
#pragma omp for schedule(static)
    for (int64_t row = 0; row < BH * S; ++row) {
      const int64_t head = row / S;
      const float* q = Q + row * D;
      const float* k = K + head * S * D;
      const float* v = V + head * S * D;
      float* o = out + row * D;
      float m = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        float part[VEC] = {};
        int64_t d = 0;
        for (; d + VEC <= D; d += VEC)
          for (int u = 0; u < VEC; ++u) part[u] += q[d + u] * k[j * D + d + u];
        for (; d < D; ++d) part[0] += q[d] * k[j * D + d];
        float s = 0.f;
        for (int u = 0; u < VEC; ++u) s += part[u];
        p[j] = s * scale;
        m = p[j] > m ? p[j] : m;
      }
      float sum = 0.f;
      for (int64_t j = 0; j < S; ++j) {
        p[j] = std::exp(p[j] - m);
        sum += p[j];
      }
      const float inv = 1.f / sum;
#if AXPY
      for (int64_t d = 0; d < D; ++d) o[d] = 0.f;
      for (int64_t j = 0; j < S; ++j) {
        const float w = p[j] * inv;
        for (int64_t d = 0; d < D; ++d) o[d] += w * v[j * D + d];
      }
#else
      for (int64_t d = 0; d < D; ++d) {
        float acc = 0.f;
        for (int64_t j = 0; j < S; ++j) acc += p[j] * v[j * D + d];
        o[d] = acc * inv;
      }
#endif
    }
  }
  // [EVOLVE_END]
  return 0;
}
