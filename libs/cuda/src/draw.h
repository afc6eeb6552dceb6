// Inputs drawn on the device (eval::Device::begin_timing): the host's generator (HostTensor::fill) run
// where the tensors live, so a case of hundreds of MiB is neither drawn on the host nor sent over the bus;
// and the other fills and checks the timing's tensors need there. Internal to libs/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "compare.h"

namespace kiln::cuda {

// How values are drawn, numbered as task::InitKind numbers them (cuda_device.cc checks that they agree).
enum class DrawKind : int32_t { kNormal = 0, kUniform = 1, kInt = 2, kZeros = 3, kOnes = 4 };

// `n` elements of `type` at `data`, as HostTensor::fill(kind, a, b, seed) draws them: the same generator,
// draw for draw, and the same arithmetic (no fused multiply-add), so the values are the host's bit for
// bit, except that a normal value's logarithm is the device's (logf, within an ulp of the host's): such a
// value may differ from the host's in its last bits. Asynchronous on `stream`.
cudaError_t draw_on_device(void* data, CompareType type, size_t n, DrawKind kind, double a, double b, uint64_t seed,
                           cudaStream_t stream);

// `bytes` bytes at `data` (a multiple of `unit`, 1, 2, 4 or 8, and aligned to it) set to `pattern`'s low
// `unit` bytes, over and over. Asynchronous.
cudaError_t repeat_on_device(void* data, size_t bytes, uint64_t pattern, size_t unit, cudaStream_t stream);

// Adds to `*differing` (device memory) how many of the `bytes` bytes at `a` and `b` differ, counted by
// 32-bit word (a word counts once however many of its bytes differ). Asynchronous.
cudaError_t count_differences(const void* a, const void* b, size_t bytes, unsigned long long* differing,
                              cudaStream_t stream);

}  // namespace kiln::cuda
