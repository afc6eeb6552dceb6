// Program 0 of the campaign-screening test: REPS passes over x (1 by default, as fast as the reference).
#include <kiln/kernel_abi.h>

#ifndef REPS
#define REPS 1
#endif

// [EVOLVE_START]
static void scale(const float* x, float* y, long n, float alpha) {
  for (int rep = 0; rep < REPS; ++rep) {
    for (long i = 0; i < n; ++i) {
      volatile float v = alpha * x[i];
      y[i] = v;
    }
  }
}
// [EVOLVE_END]

extern "C" int kiln_entry(const kiln_args* a) {
  scale(static_cast<const float*>(a->inputs[0].data), static_cast<float*>(a->outputs[0].data),
        a->inputs[0].shape[0], static_cast<float>(kiln_scalar(a, "alpha", 1.0)));
  return 0;
}
