// Trusted reference for cuda_softmax: one thread per row, three passes (max, sum of exponentials,
// normalize). Naive on purpose (uncoalesced), and obviously correct.
#include "kiln/kernel_abi.h"

__global__ void softmax_reference(const float* x, float* y, long long rows, long long cols) {
  const long long r = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  const float* xr = x + r * cols;
  float* yr = y + r * cols;
  float m = -INFINITY;
  for (long long c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
  float sum = 0.f;
  for (long long c = 0; c < cols; ++c) sum += expf(xr[c] - m);
  for (long long c = 0; c < cols; ++c) yr[c] = expf(xr[c] - m) / sum;
}

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 1 || args->n_outputs != 1) return 1;
  const long long rows = args->inputs[0].shape[0];
  const long long cols = args->inputs[0].shape[1];
  const int threads = 128;
  const long long blocks = (rows + threads - 1) / threads;
  if (blocks == 0) return 0;
  softmax_reference<<<static_cast<unsigned>(blocks), threads, 0, static_cast<cudaStream_t>(args->stream)>>>(
      static_cast<const float*>(args->inputs[0].data), static_cast<float*>(args->outputs[0].data), rows, cols);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
