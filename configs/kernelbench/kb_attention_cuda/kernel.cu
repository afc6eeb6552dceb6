// Program 0 for kb_attention_cuda, fp32, no mask, on a GPU, for Q, K, V, out of shape [B, H, S, D]:
//   out[b, h, i, :] = sum_j softmax_j(Q[b, h, i, :] . K[b, h, j, :] / sqrt(D)) V[b, h, j, :]
// One block of BLOCK threads per query row: the row's S scores in shared memory (one thread per key), a
// block max and sum, then one thread per output element summing down V (neighbouring threads: neighbouring
// d, coalesced). S up to 11264.
#include "kiln/kernel_abi.h"

#ifndef BLOCK
#define BLOCK 128
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
    attention_kernel(const float* __restrict__ Q, const float* __restrict__ K, const float* __restrict__ V,
                     float* __restrict__ out, long long S, long long D, float scale) {
  extern __shared__ float score[];
  const long long row = blockIdx.x;
  const long long head = row / S;
  const float* q = Q + row * D;
  const float* k = K + head * S * D;
  const float* v = V + head * S * D;
  float m = -INFINITY;
  for (long long j = threadIdx.x; j < S; j += BLOCK) {
    float s = 0.f;
    for (long long d = 0; d < D; ++d) s += q[d] * k[j * D + d];
    score[j] = s * scale;
    m = fmaxf(m, score[j]);
  }
  m = block_reduce<true>(m);
  float sum = 0.f;
  for (long long j = threadIdx.x; j < S; j += BLOCK) {
    score[j] = expf(score[j] - m);
    sum += score[j];
  }
  const float inv = 1.f / block_reduce<false>(sum);  // (its barriers also publish score[])
  for (long long d = threadIdx.x; d < D; d += BLOCK) {
    float acc = 0.f;
    for (long long j = 0; j < S; ++j) acc += score[j] * v[j * D + d];
    out[row * D + d] = acc * inv;
  }
}

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 3 || args->n_outputs != 1) return 1;
  const long long rows = args->inputs[0].shape[0] * args->inputs[0].shape[1] * args->inputs[0].shape[2];
  const long long S = args->inputs[0].shape[2], D = args->inputs[0].shape[3];
  if (S > 11264) return 3;  // the scores stay under 48 KiB of shared memory
  if (rows == 0) return 0;
  attention_kernel<<<static_cast<unsigned>(rows), BLOCK, static_cast<size_t>(S) * sizeof(float),
                     static_cast<cudaStream_t>(args->stream)>>>(
      static_cast<const float*>(args->inputs[0].data), static_cast<const float*>(args->inputs[1].data),
      static_cast<const float*>(args->inputs[2].data), static_cast<float*>(args->outputs[0].data), S, D,
      1.f / sqrtf(static_cast<float>(D)));
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
// [EVOLVE_END]
