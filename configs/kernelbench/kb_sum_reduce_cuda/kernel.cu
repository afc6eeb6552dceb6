// Program 0 for kb_sum_reduce_cuda: y[b, 0, j] = sum_i x[b, i, j] for x[batch, dim1, dim2], fp32, on a GPU.
// One thread per output column (b, j), summing down dim1: neighbouring threads read neighbouring floats,
// so every load is coalesced. SPLIT > 1 splits dim1 among SPLIT threads per column, combined in shared
// memory, for when batch * dim2 is too few threads to fill the GPU. BLOCK: threads per block.
#include "kiln/kernel_abi.h"

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef SPLIT
#define SPLIT 1
#endif

// [EVOLVE_START]
__global__ void __launch_bounds__(BLOCK* SPLIT)
    sum_kernel(const float* __restrict__ x, float* __restrict__ y, long long batch, long long d1, long long d2) {
  __shared__ float partial[SPLIT][BLOCK];
  const long long col = static_cast<long long>(blockIdx.x) * BLOCK + threadIdx.x;
  const bool valid = col < batch * d2;
  const long long b = valid ? col / d2 : 0, j = valid ? col % d2 : 0;
  float s = 0.f;
  if (valid)
    for (long long i = threadIdx.y; i < d1; i += SPLIT) s += x[(b * d1 + i) * d2 + j];
  partial[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && valid) {
    float t = 0.f;
    for (int k = 0; k < SPLIT; ++k) t += partial[k][threadIdx.x];
    y[col] = t;
  }
}

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 1 || args->n_outputs != 1) return 1;
  const long long batch = args->inputs[0].shape[0], d1 = args->inputs[0].shape[1], d2 = args->inputs[0].shape[2];
  const long long cols = batch * d2;
  if (cols == 0) return 0;
  sum_kernel<<<static_cast<unsigned>((cols + BLOCK - 1) / BLOCK), dim3(BLOCK, SPLIT), 0,
               static_cast<cudaStream_t>(args->stream)>>>(static_cast<const float*>(args->inputs[0].data),
                                                          static_cast<float*>(args->outputs[0].data), batch, d1, d2);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
// [EVOLVE_END]
