// Program 0 for kb_conv2d_cuda, NCHW, fp32, on a GPU:
//   y[n, o, h, w] = bias[o] + sum_{c, i, j} weight[o, c, i, j] * x[n, c, h + i - p, w + j - p]
// with p = k / 2 and x zero outside its bounds (stride 1, "same" padding, odd k).
// One thread per output element, BLOCK threads per block (neighbouring threads: neighbouring w).
#include "kiln/kernel_abi.h"

#ifndef BLOCK
#define BLOCK 256
#endif

// [EVOLVE_START]
__global__ void __launch_bounds__(BLOCK)
    conv_kernel(const float* __restrict__ x, const float* __restrict__ wt, const float* __restrict__ bias,
                float* __restrict__ y, long long N, long long C, long long H, long long W, long long O, long long k) {
  const long long idx = static_cast<long long>(blockIdx.x) * BLOCK + threadIdx.x;
  if (idx >= N * O * H * W) return;
  const long long w = idx % W, h = idx / W % H, o = idx / (W * H) % O, n = idx / (W * H * O);
  const long long p = k / 2;
  float s = bias[o];
  for (long long c = 0; c < C; ++c)
    for (long long i = 0; i < k; ++i) {
      const long long ih = h + i - p;
      if (ih < 0 || ih >= H) continue;
      for (long long j = 0; j < k; ++j) {
        const long long iw = w + j - p;
        if (iw >= 0 && iw < W) s += wt[((o * C + c) * k + i) * k + j] * x[((n * C + c) * H + ih) * W + iw];
      }
    }
  y[idx] = s;
}

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 3 || args->n_outputs != 1) return 1;
  const kiln_tensor& x = args->inputs[0];
  const long long N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const long long O = args->inputs[1].shape[0], k = args->inputs[1].shape[2];
  const long long total = N * O * H * W;
  if (total == 0) return 0;
  conv_kernel<<<static_cast<unsigned>((total + BLOCK - 1) / BLOCK), BLOCK, 0,
                static_cast<cudaStream_t>(args->stream)>>>(
      static_cast<const float*>(x.data), static_cast<const float*>(args->inputs[1].data),
      static_cast<const float*>(args->inputs[2].data), static_cast<float*>(args->outputs[0].data), N, C, H, W, O, k);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
// [EVOLVE_END]
