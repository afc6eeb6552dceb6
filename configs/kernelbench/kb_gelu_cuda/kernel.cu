// Program 0 for kb_gelu_cuda: y = 0.5 x (1 + erf(x / sqrt(2))) elementwise, fp32, on a GPU.
// BLOCK: threads per block; a grid-stride loop of VEC floats per thread per step (VEC 4: 16-byte accesses
// when the element count allows).
#include "kiln/kernel_abi.h"

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef VEC
#define VEC 1
#endif

// [EVOLVE_START]
__device__ __forceinline__ float gelu(float v) { return 0.5f * v * (1.f + erff(v * 0.70710678f)); }

__global__ void __launch_bounds__(BLOCK) gelu_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
  const long long stride = static_cast<long long>(gridDim.x) * BLOCK;
  long long i = static_cast<long long>(blockIdx.x) * BLOCK + threadIdx.x;
  if (VEC == 4 && n % 4 == 0) {
    const auto* x4 = reinterpret_cast<const float4*>(x);
    auto* y4 = reinterpret_cast<float4*>(y);
    for (; i < n / 4; i += stride) {
      float4 v = x4[i];
      v.x = gelu(v.x);
      v.y = gelu(v.y);
      v.z = gelu(v.z);
      v.w = gelu(v.w);
      y4[i] = v;
    }
    return;
  }
  for (; i < n; i += stride) y[i] = gelu(x[i]);
}

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 1 || args->n_outputs != 1) return 1;
  const long long n = args->inputs[0].shape[0] * args->inputs[0].shape[1];
  const long long work = VEC == 4 && n % 4 == 0 ? n / 4 : n;
  long long blocks = (work + BLOCK - 1) / BLOCK;
  blocks = blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks);
  gelu_kernel<<<static_cast<unsigned>(blocks), BLOCK, 0, static_cast<cudaStream_t>(args->stream)>>>(
      static_cast<const float*>(args->inputs[0].data), static_cast<float*>(args->outputs[0].data), n);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
// [EVOLVE_END]
