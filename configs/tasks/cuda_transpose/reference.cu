// Trusted reference for cuda_transpose: one thread per element, reads coalesced, writes strided. Naive on
// purpose, and obviously correct.
#include "kiln/kernel_abi.h"

__global__ void transpose_reference(const float* x, float* y, long long rows, long long cols) {
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i >= rows * cols) return;
  const long long r = i / cols, c = i % cols;
  y[c * rows + r] = x[i];
}

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 1 || args->n_outputs != 1) return 1;
  const long long rows = args->inputs[0].shape[0];
  const long long cols = args->inputs[0].shape[1];
  const int threads = 256;
  const long long blocks = (rows * cols + threads - 1) / threads;
  if (blocks == 0) return 0;
  transpose_reference<<<static_cast<unsigned>(blocks), threads, 0, static_cast<cudaStream_t>(args->stream)>>>(
      static_cast<const float*>(args->inputs[0].data), static_cast<float*>(args->outputs[0].data), rows, cols);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
