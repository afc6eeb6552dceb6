// Test data for Kiln's registry reader: a promoted CPU source. Never built by the tests.
#include <cmath>

#include "kiln/kernel_abi.h"

static void rmsnorm_rows(const float* x, const float* w, float* y, long rows, long h, double eps) {
#pragma omp parallel for
  for (long r = 0; r < rows; ++r) {
    double sum = 0;
    for (long i = 0; i < h; ++i) sum += double(x[r * h + i]) * x[r * h + i];
    float scale = float(1.0 / std::sqrt(sum / h + eps));
    for (long i = 0; i < h; ++i) y[r * h + i] = x[r * h + i] * scale * w[i];
  }
}
