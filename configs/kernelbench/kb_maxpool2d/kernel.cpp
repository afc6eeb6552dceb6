// Program 0 for kb_maxpool2d: y[n, c, h, w] = max of x[n, c, h + i - p, w + j - p] over the k x k window
// (0 <= i, j < k, p = k / 2, positions outside x skipped), stride 1, fp32, NCHW. k is the task's scalar
// kernel_size (no tensor's shape carries it).
// THREADS: OpenMP threads over planes (n, c).
// SEPARABLE: 0 takes each window's k * k maximum with a bounds check per element; 1 takes the maximum
//   along rows first (k per element, into a scratch plane), then down the columns of that (k more): 2k
//   comparisons instead of k^2, and rows that vectorize.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "kiln/kernel_abi.h"

#ifndef THREADS
#define THREADS 1
#endif
#ifndef SEPARABLE
#define SEPARABLE 0
#endif

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 1 || args->n_outputs != 1) return 1;
  const float* x = static_cast<const float*>(args->inputs[0].data);
  float* y = static_cast<float*>(args->outputs[0].data);
  const int64_t planes = args->inputs[0].shape[0] * args->inputs[0].shape[1];
  const int64_t H = args->inputs[0].shape[2], W = args->inputs[0].shape[3];
  const int64_t ks = static_cast<int64_t>(kiln_scalar(args, "kernel_size", 0));
  if (ks <= 0 || ks % 2 == 0) return 2;
  const int64_t p = ks / 2;
  // [EVOLVE_START]
#if SEPARABLE
#pragma omp parallel num_threads(THREADS)
  {
    std::vector<float> rowmax(static_cast<std::size_t>(H * W));
#pragma omp for schedule(static)
    for (int64_t pl = 0; pl < planes; ++pl) {
      const float* xp = x + pl * H * W;
      float* yp = y + pl * H * W;
      for (int64_t h = 0; h < H; ++h) {
        const float* xr = xp + h * W;
        float* rr = rowmax.data() + h * W;
        for (int64_t w = 0; w < W; ++w) rr[w] = xr[w];
        for (int64_t d = 1; d <= p; ++d) {
          for (int64_t w = 0; w + d < W; ++w) rr[w] = xr[w + d] > rr[w] ? xr[w + d] : rr[w];
          for (int64_t w = d; w < W; ++w) rr[w] = xr[w - d] > rr[w] ? xr[w - d] : rr[w];
        }
      }
      for (int64_t h = 0; h < H; ++h) {
        float* yr = yp + h * W;
        const float* rr = rowmax.data() + h * W;
        for (int64_t w = 0; w < W; ++w) yr[w] = rr[w];
        for (int64_t d = 1; d <= p; ++d) {
          if (h - d >= 0) {
            const float* up = rr - d * W;
            for (int64_t w = 0; w < W; ++w) yr[w] = up[w] > yr[w] ? up[w] : yr[w];
          }
          if (h + d < H) {
            const float* down = rr + d * W;
            for (int64_t w = 0; w < W; ++w) yr[w] = down[w] > yr[w] ? down[w] : yr[w];
          }
        }
      }
    }
  }
#else
#pragma omp parallel for num_threads(THREADS) schedule(static)
  for (int64_t pl = 0; pl < planes; ++pl) {
    const float* xp = x + pl * H * W;
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t w = 0; w < W; ++w) {
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < ks; ++i)
          for (int64_t j = 0; j < ks; ++j) {
            const int64_t ih = h + i - p, iw = w + j - p;
            if (ih >= 0 && ih < H && iw >= 0 && iw < W && xp[ih * W + iw] > m) m = xp[ih * W + iw];
          }
        y[(pl * H + h) * W + w] = m;
      }
    }
  }
#endif
  // [EVOLVE_END]
  return 0;
}
