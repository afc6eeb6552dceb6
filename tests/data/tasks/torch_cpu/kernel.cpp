// Program 0 of the integration-test task with a PyTorch reference: relu and scale in one pass.
#include <kiln/kernel_abi.h>

#ifndef UNROLL
#define UNROLL 1
#endif
#ifndef THREADS
#define THREADS 1
#endif

// [EVOLVE_START]
static void scaled_relu(const float* x, const float* scale, float* y, long rows, long dim) {
#pragma omp parallel for num_threads(THREADS)
  for (long r = 0; r < rows; ++r)
    for (long i = 0; i < dim; i += UNROLL)
      for (long u = 0; u < UNROLL && i + u < dim; ++u) {
        const float v = x[r * dim + i + u];
        y[r * dim + i + u] = (v > 0 ? v : 0.0f) * scale[i + u];
      }
}
// [EVOLVE_END]

extern "C" int kiln_entry(const kiln_args* a) {
  scaled_relu(static_cast<const float*>(a->inputs[0].data), static_cast<const float*>(a->inputs[1].data),
              static_cast<float*>(a->outputs[0].data), a->inputs[0].shape[0], a->inputs[0].shape[1]);
  return 0;
}
