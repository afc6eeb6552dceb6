// Program 0 for cuda_reduce_sum: a persistent grid (BLOCKS_PER_SM blocks per multiprocessor) strides over
// x with VEC-wide loads (4 = one 16-byte access), sums in fp32 per thread, reduces each block with warp
// shuffles, and adds the block's sum to y with one atomicAdd (y is zeroed first, on the same stream).
#include "kiln/kernel_abi.h"

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef VEC
#define VEC 4
#endif
#ifndef BLOCKS_PER_SM
#define BLOCKS_PER_SM 4
#endif

// [EVOLVE_START]
template <int kVec>
struct alignas(4 * kVec) FloatPack {
  float f[kVec];
};

template <int kBlock, int kVec>
__global__ void __launch_bounds__(kBlock) reduce_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                        long long n) {
  float sum = 0.f;
  const long long stride = static_cast<long long>(gridDim.x) * kBlock;
  const long long packs = n / kVec;
  const auto* xp = reinterpret_cast<const FloatPack<kVec>*>(x);
  for (long long p = blockIdx.x * static_cast<long long>(kBlock) + threadIdx.x; p < packs; p += stride) {
    const FloatPack<kVec> v = xp[p];
#pragma unroll
    for (int i = 0; i < kVec; ++i) sum += v.f[i];
  }
  // The tail that does not fill a whole pack.
  const long long tail = packs * kVec + blockIdx.x * static_cast<long long>(kBlock) + threadIdx.x;
  if (tail < n && tail < packs * kVec + kVec) sum += x[tail];

  __shared__ float partial[kBlock / 32];
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = sum;
  __syncthreads();
  if (threadIdx.x < 32) {
    float s = threadIdx.x < kBlock / 32 ? partial[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x == 0) atomicAdd(y, s);
  }
}
// [EVOLVE_END]

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 1 || args->n_outputs != 1) return 1;
  const auto stream = static_cast<cudaStream_t>(args->stream);
  const long long n = args->inputs[0].shape[0];
  float* y = static_cast<float*>(args->outputs[0].data);
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return 3;
  }
  if (cudaMemsetAsync(y, 0, sizeof(float), stream) != cudaSuccess) return 4;
  const long long needed = (n / VEC + BLOCK - 1) / BLOCK;
  long long blocks = static_cast<long long>(sms) * BLOCKS_PER_SM;
  if (blocks > needed) blocks = needed;
  if (blocks < 1) blocks = 1;
  reduce_kernel<BLOCK, VEC><<<static_cast<unsigned>(blocks), BLOCK, 0, stream>>>(
      static_cast<const float*>(args->inputs[0].data), y, n);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
