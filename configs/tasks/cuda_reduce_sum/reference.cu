// Trusted reference for cuda_reduce_sum: a single block strides over x, accumulating in double, and
// reduces through shared memory. Naive on purpose (one multiprocessor), and obviously correct.
#include "kiln/kernel_abi.h"

constexpr int kThreads = 256;

__global__ void reduce_reference(const float* x, float* y, long long n) {
  __shared__ double partial[kThreads];
  double sum = 0;
  for (long long i = threadIdx.x; i < n; i += kThreads) sum += x[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[0] = static_cast<float>(partial[0]);
}

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 1 || args->n_outputs != 1) return 1;
  reduce_reference<<<1, kThreads, 0, static_cast<cudaStream_t>(args->stream)>>>(
      static_cast<const float*>(args->inputs[0].data), static_cast<float*>(args->outputs[0].data),
      args->inputs[0].shape[0]);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
