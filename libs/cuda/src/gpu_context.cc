#include "gpu_context.h"

#include <cuda_runtime_api.h>

#include <cstddef>

namespace kiln::cuda::detail {
namespace {

// The flush buffer is this many times the L2: one pass of writes evicts every line.
constexpr size_t kFlushL2Multiple = 2;
constexpr size_t kFallbackL2Bytes = 64u << 20;

}  // namespace

Status Gpu::flush_l2() {
  // cudaMemsetAsync writes every line of a buffer twice the L2: nothing a kernel reads survives it.
  KILN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(flush.data(), ++flush_round & 0xff, flush.bytes(), stream.get()));
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream.get()));
  return Status::ok();
}

Status Gpu::probe_device() {
  KILN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(probe.data(), 0, probe.bytes(), stream.get()));
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream.get()));
  return Status::ok();
}

Result<std::unique_ptr<Gpu>> open_gpu(bool cold) {
  auto g = std::make_unique<Gpu>();
  KILN_ASSIGN_OR_RETURN(g->stream, Stream::create());
  KILN_ASSIGN_OR_RETURN(g->probe, DeviceBuffer::allocate(256));
  if (cold) {
    int device = 0, l2 = 0;
    KILN_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
    KILN_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
    const size_t l2_bytes = l2 > 0 ? static_cast<size_t>(l2) : kFallbackL2Bytes;
    KILN_ASSIGN_OR_RETURN(g->flush, DeviceBuffer::allocate(kFlushL2Multiple * l2_bytes));
  }
  return g;
}

}  // namespace kiln::cuda::detail
