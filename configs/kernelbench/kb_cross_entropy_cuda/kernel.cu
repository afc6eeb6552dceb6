// Program 0 for kb_cross_entropy_cuda: loss = (1 / B) sum_b [log sum_c exp(p[b, c]) - p[b, t[b]]] for logits
// p[B, C] (fp32) and int64 targets t[B], on a GPU; the output is one fp32 value. One block of BLOCK
// threads per row (a block max, then a block sum of exp(p - max)); each row adds its loss / B to the output
// (zeroed first) atomically. A target outside [0, C) makes its row's loss NaN.
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

__global__ void __launch_bounds__(BLOCK) ce_kernel(const float* __restrict__ p, const long long* __restrict__ t,
                                                   float* __restrict__ loss, long long B, long long C) {
  const float* pr = p + blockIdx.x * C;
  float m = -INFINITY;
  for (long long c = threadIdx.x; c < C; c += BLOCK) m = fmaxf(m, pr[c]);
  m = block_reduce<true>(m);
  float s = 0.f;
  for (long long c = threadIdx.x; c < C; c += BLOCK) s += expf(pr[c] - m);
  s = block_reduce<false>(s);
  if (threadIdx.x == 0) {
    const long long target = t[blockIdx.x];
    const float row = target >= 0 && target < C ? m + logf(s) - pr[target] : NAN;
    atomicAdd(loss, row / static_cast<float>(B));
  }
}

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 2 || args->n_outputs != 1) return 1;
  const long long B = args->inputs[0].shape[0], C = args->inputs[0].shape[1];
  const auto stream = static_cast<cudaStream_t>(args->stream);
  float* loss = static_cast<float*>(args->outputs[0].data);
  if (cudaMemsetAsync(loss, 0, sizeof(float), stream) != cudaSuccess) return 2;
  if (B == 0) return 0;
  ce_kernel<<<static_cast<unsigned>(B), BLOCK, 0, stream>>>(
      static_cast<const float*>(args->inputs[0].data), static_cast<const long long*>(args->inputs[1].data), loss, B, C);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
// [EVOLVE_END]
