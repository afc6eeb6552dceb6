// Test data for Kiln's registry reader: a promoted CUDA source. Never built by the tests.
#include <cuda_fp16.h>

#include "kiln/kernel_abi.h"

__global__ void rmsnorm_rows(const __half* x, const __half* w, __half* y, int h, float eps) {
  extern __shared__ float partial[];
  const __half* row = x + static_cast<size_t>(blockIdx.x) * h;
  float sum = 0.f;
  for (int i = threadIdx.x; i < h; i += blockDim.x) sum += __half2float(row[i]) * __half2float(row[i]);
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  float scale = rsqrtf(partial[0] / h + eps);
  for (int i = threadIdx.x; i < h; i += blockDim.x)
    y[static_cast<size_t>(blockIdx.x) * h + i] = __float2half(__half2float(row[i]) * scale * __half2float(w[i]));
}
