// Program 0 for kb_maxpool2d_cuda: y[n, c, h, w] = max of x[n, c, h + i - p, w + j - p] over the k x k
// window (p = k / 2, positions outside x skipped), stride 1, fp32, NCHW, on a GPU. k is the task's scalar
// kernel_size. One thread per output element, BLOCK threads per block.
#include "kiln/kernel_abi.h"

#ifndef BLOCK
#define BLOCK 256
#endif

// [EVOLVE_START]
__global__ void __launch_bounds__(BLOCK) pool_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                     long long planes, long long H, long long W, long long k) {
  const long long idx = static_cast<long long>(blockIdx.x) * BLOCK + threadIdx.x;
  if (idx >= planes * H * W) return;
  const long long w = idx % W, h = idx / W % H, pl = idx / (W * H);
  const long long p = k / 2;
  const float* xp = x + pl * H * W;
  float m = -INFINITY;
  for (long long i = 0; i < k; ++i) {
    const long long ih = h + i - p;
    if (ih < 0 || ih >= H) continue;
    for (long long j = 0; j < k; ++j) {
      const long long iw = w + j - p;
      if (iw >= 0 && iw < W) m = fmaxf(m, xp[ih * W + iw]);
    }
  }
  y[idx] = m;
}

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 1 || args->n_outputs != 1) return 1;
  const kiln_tensor& x = args->inputs[0];
  const long long planes = x.shape[0] * x.shape[1], H = x.shape[2], W = x.shape[3];
  const long long k = static_cast<long long>(kiln_scalar(args, "kernel_size", 0));
  if (k <= 0 || k % 2 == 0) return 3;
  const long long total = planes * H * W;
  if (total == 0) return 0;
  pool_kernel<<<static_cast<unsigned>((total + BLOCK - 1) / BLOCK), BLOCK, 0,
                static_cast<cudaStream_t>(args->stream)>>>(static_cast<const float*>(x.data),
                                                           static_cast<float*>(args->outputs[0].data), planes, H, W, k);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
// [EVOLVE_END]
