#include "contestant.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "runner_device.h"

namespace kiln::cuda::detail {

using eval::HostTensor;
using eval::TensorSet;

kiln_tensor descriptor(const HostTensor& shape_of, void* staged_data) {
  kiln_tensor t{};
  t.data = staged_data;
  t.dtype = static_cast<int32_t>(shape_of.dtype());
  t.ndim = static_cast<int32_t>(shape_of.shape().size());
  for (size_t d = 0; d < shape_of.shape().size() && d < KILN_MAX_DIMS; ++d) t.shape[d] = shape_of.shape()[d];
  return t;
}

Layout::Layout(const TensorSet& shapes, Placement p) : arena(p.arena) {
  size_t offset = p.offset / kTensorAlignment * kTensorAlignment;
  auto place = [&](const HostTensor& t, std::vector<size_t>& at, std::vector<kiln_tensor>& d) {
    at.push_back(offset);
    d.push_back(descriptor(t, encode_arena_offset(arena, offset)));
    offset += round_up(std::max<size_t>(t.bytes(), 1), kTensorAlignment);
  };
  for (const auto& t : shapes.inputs) place(t, in, inputs);
  for (const auto& t : shapes.outputs) place(t, out, outputs);
}

Status Contestant::upload(const TensorSet& host) {
  for (size_t i = 0; i < host.inputs.size(); ++i) {
    KILN_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(at(layout.in[i]), host.inputs[i].data(), host.inputs[i].bytes(), cudaMemcpyHostToDevice));
  }
  for (size_t i = 0; i < host.outputs.size(); ++i) {
    KILN_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(at(layout.out[i]), host.outputs[i].data(), host.outputs[i].bytes(), cudaMemcpyHostToDevice));
  }
  KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return Status::ok();
}

Status Contestant::download(TensorSet& host, bool inputs_too) const {
  for (size_t i = 0; inputs_too && i < host.inputs.size(); ++i) {
    KILN_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(host.inputs[i].data(), at(layout.in[i]), host.inputs[i].bytes(), cudaMemcpyDeviceToHost));
  }
  for (size_t i = 0; i < host.outputs.size(); ++i) {
    KILN_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(host.outputs[i].data(), at(layout.out[i]), host.outputs[i].bytes(), cudaMemcpyDeviceToHost));
  }
  return Status::ok();
}

}  // namespace kiln::cuda::detail
