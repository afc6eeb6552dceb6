// Trusted reference for cuda_rmsnorm: one thread per row, fp32 accumulation. Naive on purpose (its loads
// are not coalesced), and obviously correct.
#include <cuda_fp16.h>

#include "kiln/kernel_abi.h"

__global__ void rmsnorm_reference(const __half* x, const __half* w, __half* y, long long rows, long long cols,
                                  float eps) {
  const long long r = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  const __half* xr = x + r * cols;
  __half* yr = y + r * cols;
  float sum = 0.f;
  for (long long c = 0; c < cols; ++c) {
    const float v = __half2float(xr[c]);
    sum += v * v;
  }
  const float inv = rsqrtf(sum / static_cast<float>(cols) + eps);
  for (long long c = 0; c < cols; ++c) yr[c] = __float2half(__half2float(xr[c]) * inv * __half2float(w[c]));
}

extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  if (args->n_inputs != 2 || args->n_outputs != 1) return 1;
  const long long rows = args->inputs[0].shape[0];
  const long long cols = args->inputs[0].shape[1];
  const float eps = static_cast<float>(kiln_scalar(args, "eps", 1e-6));
  const int threads = 128;
  const long long blocks = (rows + threads - 1) / threads;
  if (blocks == 0) return 0;
  rmsnorm_reference<<<static_cast<unsigned>(blocks), threads, 0, static_cast<cudaStream_t>(args->stream)>>>(
      static_cast<const __half*>(args->inputs[0].data), static_cast<const __half*>(args->inputs[1].data),
      static_cast<__half*>(args->outputs[0].data), rows, cols, eps);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
