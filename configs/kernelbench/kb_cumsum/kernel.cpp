// Program 0 for kb_cumsum: y[b, i] = x[b, 0] + ... + x[b, i] for x[batch_size, length], fp32.
// THREADS: OpenMP threads over blocks of rows.
// ROWS: rows scanned together, interleaved: a running sum is a chain of dependent additions (one add's
//   latency per element); ROWS independent chains keep the adder busy. Each row's sum keeps its order.
#include <cstdint>

#include "kiln/kernel_abi.h"

#ifndef THREADS
#define THREADS 1
#endif
#ifndef ROWS
#define ROWS 1
#endif

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 1 || args->n_outputs != 1) return 1;
  const float* x = static_cast<const float*>(args->inputs[0].data);
  float* y = static_cast<float*>(args->outputs[0].data);
  const int64_t batch = args->inputs[0].shape[0];
  const int64_t len = args->inputs[0].shape[1];
  // [EVOLVE_START]
  const int64_t blocks = (batch + ROWS - 1) / ROWS;
#pragma omp parallel for num_threads(THREADS) schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t r0 = blk * ROWS;
    if (r0 + ROWS <= batch) {
      float s[ROWS] = {};
      for (int64_t i = 0; i < len; ++i)
        for (int r = 0; r < ROWS; ++r) {
          s[r] += x[(r0 + r) * len + i];
          y[(r0 + r) * len + i] = s[r];
        }
    } else {
      for (int64_t r = r0; r < batch; ++r) {
        float s = 0.f;
        for (int64_t i = 0; i < len; ++i) {
          s += x[r * len + i];
          y[r * len + i] = s;
        }
      }
    }
  }
  // [EVOLVE_END]
  return 0;
}
