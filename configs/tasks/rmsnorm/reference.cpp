// Trusted reference for rmsnorm: one row at a time, sums in double, single-threaded.
#include <cmath>
#include <cstdint>

#include "kiln/kernel_abi.h"

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 2 || args->n_outputs != 1) return 1;
  const float* x = static_cast<const float*>(args->inputs[0].data);
  const float* w = static_cast<const float*>(args->inputs[1].data);
  float* y = static_cast<float*>(args->outputs[0].data);
  const int64_t rows = args->inputs[0].shape[0];
  const int64_t cols = args->inputs[0].shape[1];
  const double eps = kiln_scalar(args, "eps", 1e-6);
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += static_cast<double>(x[r * cols + c]) * x[r * cols + c];
    const double inv = 1.0 / std::sqrt(sum / static_cast<double>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = static_cast<float>(x[r * cols + c] * inv * w[c]);
  }
  return 0;
}
