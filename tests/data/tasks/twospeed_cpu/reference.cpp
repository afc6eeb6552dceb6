// Trusted reference of the campaign-screening test: y = alpha * x, once.
#include <kiln/kernel_abi.h>

extern "C" int kiln_entry(const kiln_args* a) {
  const float* x = static_cast<const float*>(a->inputs[0].data);
  float* y = static_cast<float*>(a->outputs[0].data);
  const long n = a->inputs[0].shape[0];
  const float alpha = static_cast<float>(kiln_scalar(a, "alpha", 1.0));
  for (long i = 0; i < n; ++i) y[i] = alpha * x[i];
  return 0;
}
