// Program 0 of the integration-test task.
#include <kiln/kernel_abi.h>

#ifndef UNROLL
#define UNROLL 1
#endif
#ifndef THREADS
#define THREADS 1
#endif

// [EVOLVE_START]
static void scale(const float* x, float* y, long n, float alpha) {
#pragma omp parallel for num_threads(THREADS)
  for (long i = 0; i < n; i += UNROLL)
    for (long u = 0; u < UNROLL && i + u < n; ++u) y[i + u] = alpha * x[i + u];
}
// [EVOLVE_END]

extern "C" int kiln_entry(const kiln_args* a) {
  scale(static_cast<const float*>(a->inputs[0].data), static_cast<float*>(a->outputs[0].data),
        a->inputs[0].shape[0], static_cast<float>(kiln_scalar(a, "alpha", 1.0)));
  return 0;
}
