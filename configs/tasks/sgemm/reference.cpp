// Trusted reference for sgemm: the textbook triple loop, dot products in double, single-threaded.
#include <cstdint>

#include "kiln/kernel_abi.h"

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 2 || args->n_outputs != 1) return 1;
  const float* a = static_cast<const float*>(args->inputs[0].data);
  const float* b = static_cast<const float*>(args->inputs[1].data);
  float* c = static_cast<float*>(args->outputs[0].data);
  const int64_t m = args->inputs[0].shape[0];
  const int64_t k = args->inputs[0].shape[1];
  const int64_t n = args->inputs[1].shape[1];
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += static_cast<double>(a[i * k + p]) * b[p * n + j];
      c[i * n + j] = static_cast<float>(sum);
    }
  }
  return 0;
}
