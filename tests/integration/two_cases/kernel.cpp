// Program 0 of the two-case integration test: with SLOW_LARGE=1, inputs above 32768 elements take the
// slow path (80 recomputations per element, twice the reference's 40).
#include <kiln/kernel_abi.h>

#ifndef SLOW_LARGE
#define SLOW_LARGE 1
#endif

// [EVOLVE_START]
static void scale(const float* x, float* y, long n, float alpha) {
  const int reps = SLOW_LARGE && n > 32768 ? 80 : 1;
  for (int rep = 0; rep < reps; ++rep) {
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
