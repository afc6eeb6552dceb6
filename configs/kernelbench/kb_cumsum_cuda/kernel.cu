// Program 0 for kb_cumsum_cuda: y[b, i] = x[b, 0] + ... + x[b, i] for x[batch_size, length], fp32, on a GPU.
// One block of BLOCK threads per row, the row scanned in chunks of BLOCK elements: an inclusive scan of
// the chunk (warp shuffles, then the warps' totals), plus the running total of the chunks before it.
#include "kiln/kernel_abi.h"

#ifndef BLOCK
#define BLOCK 256
#endif

// [EVOLVE_START]
__global__ void __launch_bounds__(BLOCK)
    cumsum_kernel(const float* __restrict__ x, float* __restrict__ y, long long len) {
  __shared__ float warp_total[BLOCK / 32];
  __shared__ float carry;
  const float* xr = x + blockIdx.x * len;
  float* yr = y + blockIdx.x * len;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) carry = 0.f;
  __syncthreads();
  for (long long c0 = 0; c0 < len; c0 += BLOCK) {
    const long long c = c0 + threadIdx.x;
    float v = c < len ? xr[c] : 0.f;
    for (int o = 1; o < 32; o <<= 1) {
      const float up = __shfl_up_sync(0xffffffffu, v, o);
      if (lane >= o) v += up;
    }
    if (lane == 31) warp_total[warp] = v;
    __syncthreads();
    float before = carry;
    for (int i = 0; i < warp; ++i) before += warp_total[i];
    if (c < len) yr[c] = before + v;
    __syncthreads();
    if (threadIdx.x == BLOCK - 1) carry = before + v;
    __syncthreads();
  }
}

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 1 || args->n_outputs != 1) return 1;
  const long long rows = args->inputs[0].shape[0], len = args->inputs[0].shape[1];
  if (rows == 0) return 0;
  cumsum_kernel<<<static_cast<unsigned>(rows), BLOCK, 0, static_cast<cudaStream_t>(args->stream)>>>(
      static_cast<const float*>(args->inputs[0].data), static_cast<float*>(args->outputs[0].data), len);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
// [EVOLVE_END]
