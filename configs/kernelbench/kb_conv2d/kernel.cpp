// Program 0 for kb_conv2d: y[n, o, h, w] = bias[o] + sum_{c, i, j} weight[o, c, i, j] * x[n, c, h + i - p, w + j - p]
// with p = k / 2 and x zero outside its bounds (stride 1, "same" padding, odd k), fp32, NCHW.
// THREADS: OpenMP threads over (image, output-channel block).
// PLANE: 0 computes each output pixel as one sum with a bounds check per term; 1 accumulates whole output
//   planes: for each (c, i, j) a scaled row of x is added to a row of y over the columns where it is in
//   bounds, contiguous and vectorized, no check inside.
// OC_BLOCK (PLANE=1 only): output channels accumulated together, so each row of x read is used that often.
#include <cstdint>

#include "kiln/kernel_abi.h"

#ifndef THREADS
#define THREADS 1
#endif
#ifndef PLANE
#define PLANE 0
#endif
#ifndef OC_BLOCK
#define OC_BLOCK 1
#endif

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 3 || args->n_outputs != 1) return 1;
  const float* x = static_cast<const float*>(args->inputs[0].data);
  const float* wt = static_cast<const float*>(args->inputs[1].data);
  const float* bias = static_cast<const float*>(args->inputs[2].data);
  float* y = static_cast<float*>(args->outputs[0].data);
  const int64_t N = args->inputs[0].shape[0], C = args->inputs[0].shape[1];
  const int64_t H = args->inputs[0].shape[2], W = args->inputs[0].shape[3];
  const int64_t O = args->inputs[1].shape[0], k = args->inputs[1].shape[2];
  const int64_t p = k / 2;
  // [EVOLVE_START]
#if PLANE
  const int64_t blocks = (O + OC_BLOCK - 1) / OC_BLOCK;
#pragma omp parallel for collapse(2) num_threads(THREADS) schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t ob = 0; ob < blocks; ++ob) {
      const int64_t o0 = ob * OC_BLOCK;
      const int64_t oc = O - o0 < OC_BLOCK ? O - o0 : OC_BLOCK;
      float* yo = y + (n * O + o0) * H * W;
      for (int64_t o = 0; o < oc; ++o)
        for (int64_t e = 0; e < H * W; ++e) yo[o * H * W + e] = bias[o0 + o];
      for (int64_t c = 0; c < C; ++c) {
        const float* xc = x + (n * C + c) * H * W;
        for (int64_t i = 0; i < k; ++i) {
          for (int64_t j = 0; j < k; ++j) {
            float wv[OC_BLOCK];
            for (int64_t o = 0; o < oc; ++o) wv[o] = wt[(((o0 + o) * C + c) * k + i) * k + j];
            const int64_t w0 = p - j > 0 ? p - j : 0;
            const int64_t w1 = W + p - j < W ? W + p - j : W;
            for (int64_t h = 0; h < H; ++h) {
              const int64_t ih = h + i - p;
              if (ih < 0 || ih >= H) continue;
              const float* xr = xc + ih * W;
              const int64_t dj = j - p;
              for (int64_t o = 0; o < oc; ++o) {
                float* yr = yo + o * H * W + h * W;
                const float wo = wv[o];
                for (int64_t w = w0; w < w1; ++w) yr[w] += wo * xr[w + dj];
              }
            }
          }
        }
      }
    }
  }
#else
#pragma omp parallel for collapse(2) num_threads(THREADS) schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < O; ++o) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t w = 0; w < W; ++w) {
          float s = bias[o];
          for (int64_t c = 0; c < C; ++c)
            for (int64_t i = 0; i < k; ++i)
              for (int64_t j = 0; j < k; ++j) {
                const int64_t ih = h + i - p, iw = w + j - p;
                if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                  s += wt[((o * C + c) * k + i) * k + j] * x[((n * C + c) * H + ih) * W + iw];
              }
          y[((n * O + o) * H + h) * W + w] = s;
        }
      }
    }
  }
#endif
  // [EVOLVE_END]
  return 0;
}
