// Program 0 for kb_cross_entropy: loss = (1 / B) sum_b [log sum_c exp(p[b, c]) - p[b, t[b]]] for logits
// p[B, C] (fp32) and int64 targets t[B]; the output is one fp32 value. A target outside [0, C) fails the call.
// THREADS: OpenMP threads over rows (the per-row losses are summed in double, in row order).
// VEC: independent partial results in the row's max and sum reductions.
// POLY_EXP: 0 calls the C library's expf (a call per element, not vectorized); 1 uses an exp of its own
//   (a degree-6 polynomial and the exponent's bits, relative error ~1e-7) that the compiler vectorizes.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kiln/kernel_abi.h"

#ifndef THREADS
#define THREADS 1
#endif
#ifndef VEC
#define VEC 1
#endif
#ifndef POLY_EXP
#define POLY_EXP 0
#endif

// [EVOLVE_START]
// exp(v) for v <= 0: 2^n * q(r) with v = n ln2 + r, |r| <= ln2 / 2, q a degree-6 polynomial.
static inline float exp_neg(float v) {
#if POLY_EXP
  v = v < -87.f ? -87.f : v;
  const float n = std::nearbyint(v * 1.44269504f);
  const float r = v - n * 0.693145752f - n * 1.42860677e-6f;
  float q = 1.f / 720.f;
  q = q * r + 1.f / 120.f;
  q = q * r + 1.f / 24.f;
  q = q * r + 1.f / 6.f;
  q = q * r + 0.5f;
  q = q * r + 1.f;
  q = q * r + 1.f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return q * scale;
#else
  return std::exp(v);
#endif
}

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 2 || args->n_outputs != 1) return 1;
  const float* p = static_cast<const float*>(args->inputs[0].data);
  const int64_t* t = static_cast<const int64_t*>(args->inputs[1].data);
  float* loss = static_cast<float*>(args->outputs[0].data);
  const int64_t B = args->inputs[0].shape[0];
  const int64_t C = args->inputs[0].shape[1];
  for (int64_t b = 0; b < B; ++b)
    if (t[b] < 0 || t[b] >= C) return 2;
  std::vector<double> row_loss(static_cast<std::size_t>(B));
#pragma omp parallel for num_threads(THREADS) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    const float* pr = p + b * C;
    float mx[VEC];
    for (int v = 0; v < VEC; ++v) mx[v] = pr[0];
    int64_t c = 0;
    for (; c + VEC <= C; c += VEC)
      for (int v = 0; v < VEC; ++v) mx[v] = pr[c + v] > mx[v] ? pr[c + v] : mx[v];
    for (; c < C; ++c) mx[0] = pr[c] > mx[0] ? pr[c] : mx[0];
    float m = mx[0];
    for (int v = 1; v < VEC; ++v) m = mx[v] > m ? mx[v] : m;
    float acc[VEC] = {};
    for (c = 0; c + VEC <= C; c += VEC)
      for (int v = 0; v < VEC; ++v) acc[v] += exp_neg(pr[c + v] - m);
    for (; c < C; ++c) acc[0] += exp_neg(pr[c] - m);
    float s = 0.f;
    for (int v = 0; v < VEC; ++v) s += acc[v];
    row_loss[static_cast<std::size_t>(b)] = static_cast<double>(m) + std::log(static_cast<double>(s)) - pr[t[b]];
  }
  double total = 0;
  for (int64_t b = 0; b < B; ++b) total += row_loss[static_cast<std::size_t>(b)];
  loss[0] = static_cast<float>(total / static_cast<double>(B));
  return 0;
}
// [EVOLVE_END]
