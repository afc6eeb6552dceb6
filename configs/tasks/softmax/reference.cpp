// Trusted reference for softmax: one row at a time, exp and sums in double, single-threaded.
#include <cmath>
#include <cstdint>

#include "kiln/kernel_abi.h"

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 1 || args->n_outputs != 1) return 1;
  const float* x = static_cast<const float*>(args->inputs[0].data);
  float* y = static_cast<float*>(args->outputs[0].data);
  const int64_t rows = args->inputs[0].shape[0];
  const int64_t cols = args->inputs[0].shape[1];
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    double max = xr[0];
    for (int64_t c = 1; c < cols; ++c) max = std::fmax(max, static_cast<double>(xr[c]));
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(xr[c] - max);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = static_cast<float>(std::exp(xr[c] - max) / sum);
  }
  return 0;
}
