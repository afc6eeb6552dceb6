// Program 0: y = alpha * x, with an editable region for the element and one for the loop.
#include <kiln/kernel_abi.h>

// [EVOLVE_START]
static float scaled(float alpha, float x) { return alpha * x; }
// [EVOLVE_END]

static void scale(const float* x, float* y, long n, float alpha) {
  // [EVOLVE_START]
  for (long i = 0; i < n; ++i) y[i] = scaled(alpha, x[i]);
  // [EVOLVE_END]
}

extern "C" int kiln_entry(const kiln_args* a) {
  scale(static_cast<const float*>(a->inputs[0].data), static_cast<float*>(a->outputs[0].data),
        a->inputs[0].shape[0], static_cast<float>(kiln_scalar(a, "alpha", 1.0)));
  return 0;
}
