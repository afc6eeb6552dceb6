// Program 0 for kb_softmax_cuda: each row of x[batch_size, dim] becomes exp(x - max) / sum(exp(x - max)),
// fp32, on a GPU. One block of BLOCK threads per row: a block max, a block sum of exp(x - max), then the
// write (three passes over the row, the later ones from L2).
#include "kiln/kernel_abi.h"

#ifndef BLOCK
#define BLOCK 256
#endif

// [EVOLVE_START]
template <bool kMax>
__device__ float block_reduce(float v) {
  __shared__ float partial[BLOCK / 32];
  __shared__ float total;
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = partial[0];
    for (int i = 1; i < BLOCK / 32; ++i) t = kMax ? fmaxf(t, partial[i]) : t + partial[i];
    total = t;
  }
  __syncthreads();
  const float out = total;
  __syncthreads();
  return out;
}

__global__ void __launch_bounds__(BLOCK)
    softmax_kernel(const float* __restrict__ x, float* __restrict__ y, long long cols) {
  const float* xr = x + blockIdx.x * cols;
  float* yr = y + blockIdx.x * cols;
  float m = -INFINITY;
  for (long long c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
  m = block_reduce<true>(m);
  float s = 0.f;
  for (long long c = threadIdx.x; c < cols; c += BLOCK) s += expf(xr[c] - m);
  const float inv = 1.f / block_reduce<false>(s);
  for (long long c = threadIdx.x; c < cols; c += BLOCK) yr[c] = expf(xr[c] - m) * inv;
}

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 1 || args->n_outputs != 1) return 1;
  const long long rows = args->inputs[0].shape[0], cols = args->inputs[0].shape[1];
  if (rows == 0) return 0;
  softmax_kernel<<<static_cast<unsigned>(rows), BLOCK, 0, static_cast<cudaStream_t>(args->stream)>>>(
      static_cast<const float*>(args->inputs[0].data), static_cast<float*>(args->outputs[0].data), cols);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
// [EVOLVE_END]
