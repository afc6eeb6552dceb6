#include "contestant.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <random>

#include "cuda_device.h"
#include "kiln/eval/runner.h"
#include "kiln/eval/torch_module.h"
#include "runner_device.h"

namespace kiln::cuda {
namespace {

// The stream of placement_seed the arenas' allocation order is drawn from (the blocks' placements use
// block numbers, far below it).
constexpr uint64_t kAllocationDraw = uint64_t{1} << 40;
// An arena's size is rounded up to this. The runners map the evaluator's arenas through CUDA IPC, and on
// an H200 an allocation whose size is not a multiple of 2 MiB was slower to read in the process that
// imported it, by a different amount for each allocation: one latency-bound cuda_reduce_sum kernel
// (BLOCK 128, VEC 1, BLOCKS_PER_SM 4) ran 259-295 us across 16 such arenas of one process and 256-259 us
// on arenas rounded up to 2 MiB, on the importer's own allocations and on memory shared through the
// driver's virtual-memory handles (bench/timing/arena_probe.sh, results/arena_probe_h200*.jsonl). That
// spread made the kernel's median depend on which arenas a process drew: 20 % between evaluations.
constexpr size_t kArenaGranularity = size_t{2} << 20;

}  // namespace

std::vector<size_t> arena_allocation_order(size_t contestants, size_t arenas, uint64_t seed) {
  std::vector<size_t> order;
  for (size_t k = 0; k < arenas; ++k) {
    for (size_t who = 0; who < contestants; ++who) order.push_back(who);
  }
  std::shuffle(order.begin(), order.end(), std::mt19937_64(eval::mix_seed(seed, kAllocationDraw)));
  return order;
}

Result<std::vector<eval::RunnerKernel>> runner_kernels(const task::TaskSpec& spec, const eval::Candidate& candidate,
                                                       const eval::Candidate& reference, const std::string& python) {
  std::vector<eval::RunnerKernel> kernels = {{"candidate", candidate.entry, candidate.library, nullptr, nullptr}};
  if (spec.torch_reference()) {
    KILN_ASSIGN_OR_RETURN(eval::RunnerKernel k,
                          eval::torch_kernel(spec, python, {"reference", false, "cuda", kArenaShift}));
    kernels.push_back(std::move(k));
  } else {
    kernels.push_back({"reference", reference.entry, reference.library, nullptr, overhead_entry});
  }
  for (const auto& b : spec.baselines) {
    if (!eval::is_torch_baseline(b)) {
      kernels.push_back({b, cublas_sgemm_entry, "", nullptr});
      continue;
    }
    KILN_ASSIGN_OR_RETURN(eval::RunnerKernel k,
                          eval::torch_kernel(spec, python, {b, b == eval::kTorchCompile, "cuda", kArenaShift}));
    kernels.push_back(std::move(k));
  }
  if (spec.torch_reference()) kernels.push_back({"probe", overhead_entry, "", nullptr, nullptr});
  return kernels;
}

// Device bytes one contestant's arena holds: the largest case with the placement slack, in whole 2 MiB.
Result<size_t> device_arena_bytes(const task::TaskSpec& spec) {
  KILN_RETURN_IF_ERROR(eval::check_runner_limits(spec));
  KILN_ASSIGN_OR_RETURN(const size_t most, eval::largest_case_bytes(spec, detail::kTensorAlignment));
  return detail::round_up(most + detail::kPlacementSlack, kArenaGranularity);
}

namespace detail {

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

}  // namespace detail
}  // namespace kiln::cuda
