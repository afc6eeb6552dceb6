// Program 0 for kb_layernorm_cuda: every row of x (the last dimension, `hidden`) becomes
// (x - mean) / sqrt(var + 1e-5) * weight + bias, var the biased variance, fp32, on a GPU.
// One block of BLOCK threads per row: a block reduction for the mean, another for the variance (two
// passes over the row, the second from L1/L2), then the write.
#include "kiln/kernel_abi.h"

#ifndef BLOCK
#define BLOCK 256
#endif

// [EVOLVE_START]
__device__ float block_sum(float v) {
  __shared__ float partial[BLOCK / 32];
  __shared__ float total;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int i = 0; i < BLOCK / 32; ++i) s += partial[i];
    total = s;
  }
  __syncthreads();
  const float out = total;
  __syncthreads();
  return out;
}

__global__ void __launch_bounds__(BLOCK)
    layernorm_kernel(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                     float* __restrict__ y, long long h) {
  const float* xr = x + blockIdx.x * h;
  float* yr = y + blockIdx.x * h;
  float s = 0.f;
  for (long long c = threadIdx.x; c < h; c += BLOCK) s += xr[c];
  const float mean = block_sum(s) / h;
  float q = 0.f;
  for (long long c = threadIdx.x; c < h; c += BLOCK) q += (xr[c] - mean) * (xr[c] - mean);
  const float inv = rsqrtf(block_sum(q) / h + 1e-5f);
  for (long long c = threadIdx.x; c < h; c += BLOCK) yr[c] = (xr[c] - mean) * inv * w[c] + b[c];
}

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 3 || args->n_outputs != 1) return 1;
  const long long rows = args->inputs[0].shape[0] * args->inputs[0].shape[1];
  const long long h = args->inputs[0].shape[2];
  if (rows == 0) return 0;
  layernorm_kernel<<<static_cast<unsigned>(rows), BLOCK, 0, static_cast<cudaStream_t>(args->stream)>>>(
      static_cast<const float*>(args->inputs[0].data), static_cast<const float*>(args->inputs[1].data),
      static_cast<const float*>(args->inputs[2].data), static_cast<float*>(args->outputs[0].data), h);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
// [EVOLVE_END]
