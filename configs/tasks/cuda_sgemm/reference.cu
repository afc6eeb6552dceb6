// Trusted reference for cuda_sgemm: one thread per output element, a plain loop over K in fp32. Naive on
// purpose, and obviously correct.
#include "kiln/kernel_abi.h"

__global__ void sgemm_reference(const float* a, const float* b, float* c, int m, int n, int k) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= m || col >= n) return;
  float acc = 0.f;
  for (int i = 0; i < k; ++i) acc += a[static_cast<long long>(row) * k + i] * b[static_cast<long long>(i) * n + col];
  c[static_cast<long long>(row) * n + col] = acc;
}

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 2 || args->n_outputs != 1) return 1;
  const int m = static_cast<int>(args->inputs[0].shape[0]);
  const int k = static_cast<int>(args->inputs[0].shape[1]);
  const int n = static_cast<int>(args->inputs[1].shape[1]);
  if (m == 0 || n == 0) return 0;
  const dim3 block(16, 16);
  const dim3 grid((n + 15) / 16, (m + 15) / 16);
  sgemm_reference<<<grid, block, 0, static_cast<cudaStream_t>(args->stream)>>>(
      static_cast<const float*>(args->inputs[0].data), static_cast<const float*>(args->inputs[1].data),
      static_cast<float*>(args->outputs[0].data), m, n, k);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
