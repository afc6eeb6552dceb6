// Trusted reference for the two-case integration test: y = alpha * x, recomputed 40 times per element.
#include <kiln/kernel_abi.h>

extern "C" int kiln_entry(const kiln_args* a) {
  const float* x = static_cast<const float*>(a->inputs[0].data);
  float* y = static_cast<float*>(a->outputs[0].data);
  const long n = a->inputs[0].shape[0];
  const float alpha = static_cast<float>(kiln_scalar(a, "alpha", 1.0));
  for (int rep = 0; rep < 40; ++rep) {
    for (long i = 0; i < n; ++i) {
      volatile float v = alpha * x[i];
      y[i] = v;
    }
  }
  return 0;
}
