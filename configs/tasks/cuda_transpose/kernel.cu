// Program 0 for cuda_transpose: a TILE x TILE tile goes through shared memory (one padding column, so the
// column reads of the transposed write hit 32 different banks); each block has TILE x BLOCK_ROWS threads,
// each moving TILE / BLOCK_ROWS elements, so reads and writes are both coalesced.
#include "kiln/kernel_abi.h"

#ifndef TILE
#define TILE 32
#endif
#ifndef BLOCK_ROWS
#define BLOCK_ROWS 8
#endif

// [EVOLVE_START]
template <int kTile, int kBlockRows>
__global__ void __launch_bounds__(kTile * kBlockRows) transpose_kernel(const float* __restrict__ x,
                                                                     float* __restrict__ y, long long rows,
                                                                     long long cols) {
  __shared__ float tile[kTile][kTile + 1];
  const long long c0 = static_cast<long long>(blockIdx.x) * kTile;
  const long long r0 = static_cast<long long>(blockIdx.y) * kTile;
#pragma unroll
  for (int j = threadIdx.y; j < kTile; j += kBlockRows) {
    const long long r = r0 + j, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[j][threadIdx.x] = x[r * cols + c];
  }
  __syncthreads();
#pragma unroll
  for (int j = threadIdx.y; j < kTile; j += kBlockRows) {
    const long long c = c0 + j, r = r0 + threadIdx.x;  // y[c, r]
    if (c < cols && r < rows) y[c * rows + r] = tile[threadIdx.x][j];
  }
}
// [EVOLVE_END]

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 1 || args->n_outputs != 1) return 1;
  const long long rows = args->inputs[0].shape[0];
  const long long cols = args->inputs[0].shape[1];
  if (rows == 0 || cols == 0) return 0;
  const dim3 grid(static_cast<unsigned>((cols + TILE - 1) / TILE), static_cast<unsigned>((rows + TILE - 1) / TILE));
  const dim3 block(TILE, BLOCK_ROWS);
  transpose_kernel<TILE, BLOCK_ROWS><<<grid, block, 0, static_cast<cudaStream_t>(args->stream)>>>(
      static_cast<const float*>(args->inputs[0].data), static_cast<float*>(args->outputs[0].data), rows, cols);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
