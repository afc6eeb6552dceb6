// Program 0 for kb_gelu: y = 0.5 x (1 + erf(x / sqrt(2))) elementwise, fp32.
// THREADS: OpenMP threads over the elements.
// POLY_ERF: 0 calls the C library's erff (a call per element, not vectorized); 1 uses erf's approximation
//   by Abramowitz and Stegun (7.1.26, absolute error under 1.5e-7) with an exp of its own, all arithmetic
//   the compiler vectorizes.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kiln/kernel_abi.h"

#ifndef THREADS
#define THREADS 1
#endif
#ifndef POLY_ERF
#define POLY_ERF 0
#endif

// [EVOLVE_START]
// exp(v) for v <= 0: 2^n * p(r) with v = n ln2 + r, |r| <= ln2 / 2, p a degree-6 polynomial.
static inline float exp_neg(float v) {
  v = v < -87.f ? -87.f : v;
  const float n = std::nearbyint(v * 1.44269504f);
  const float r = v - n * 0.693145752f - n * 1.42860677e-6f;
  float p = 1.f / 720.f;
  p = p * r + 1.f / 120.f;
  p = p * r + 1.f / 24.f;
  p = p * r + 1.f / 6.f;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

static inline float erf_poly(float z) {
  const float a = std::fabs(z);
  const float t = 1.f / (1.f + 0.3275911f * a);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float e = 1.f - p * t * exp_neg(-a * a);
  return z < 0.f ? -e : e;
}

static inline float gelu(float v) {
#if POLY_ERF
  return 0.5f * v * (1.f + erf_poly(v * 0.70710678f));
#else
  return 0.5f * v * (1.f + std::erf(v * 0.70710678f));
#endif
}

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 1 || args->n_outputs != 1) return 1;
  const float* x = static_cast<const float*>(args->inputs[0].data);
  float* y = static_cast<float*>(args->outputs[0].data);
  const int64_t n = args->inputs[0].shape[0] * args->inputs[0].shape[1];
#pragma omp parallel for simd num_threads(THREADS) schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = gelu(x[i]);
  return 0;
}
// [EVOLVE_END]
