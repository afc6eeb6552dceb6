// Program 0 for kb_matmul_cuda: C[M, N] = A[M, K] @ B[K, N], fp32, row-major, on a GPU.
// One thread per element of C; TILE x TILE tiles of A and B staged in shared memory (TILE: 8, 16 or 32).
#include "kiln/kernel_abi.h"

#ifndef TILE
#define TILE 16
#endif

// [EVOLVE_START]
template <int kTile>
__global__ void __launch_bounds__(kTile* kTile)
    matmul_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, long long M,
                  long long K, long long N) {
  __shared__ float a[kTile][kTile];
  __shared__ float b[kTile][kTile + 1];
  const long long row = static_cast<long long>(blockIdx.y) * kTile + threadIdx.y;
  const long long col = static_cast<long long>(blockIdx.x) * kTile + threadIdx.x;
  float acc = 0.f;
  for (long long k0 = 0; k0 < K; k0 += kTile) {
    a[threadIdx.y][threadIdx.x] = row < M && k0 + threadIdx.x < K ? A[row * K + k0 + threadIdx.x] : 0.f;
    b[threadIdx.y][threadIdx.x] = k0 + threadIdx.y < K && col < N ? B[(k0 + threadIdx.y) * N + col] : 0.f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kTile; ++k) acc += a[threadIdx.y][k] * b[k][threadIdx.x];
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = acc;
}

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 2 || args->n_outputs != 1) return 1;
  const long long M = args->inputs[0].shape[0], K = args->inputs[0].shape[1], N = args->inputs[1].shape[1];
  const dim3 block(TILE, TILE);
  const dim3 grid(static_cast<unsigned>((N + TILE - 1) / TILE), static_cast<unsigned>((M + TILE - 1) / TILE));
  matmul_kernel<TILE><<<grid, block, 0, static_cast<cudaStream_t>(args->stream)>>>(
      static_cast<const float*>(args->inputs[0].data), static_cast<const float*>(args->inputs[1].data),
      static_cast<float*>(args->outputs[0].data), M, K, N);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
// [EVOLVE_END]
