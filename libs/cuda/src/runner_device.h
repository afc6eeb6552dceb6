// The CUDA side of a runner (kiln/eval/runner.h): each runner process creates its own context,
// maps the device arena the evaluator shares with it alone (CUDA IPC), and calls its kernel on its own
// stream, then synchronizes its whole device before answering. Internal to libs/cuda.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/core/status.h"
#include "kiln/eval/device.h"
#include "kiln/eval/runner.h"
#include "kiln/kernel_abi.h"

namespace kiln::cuda {

const eval::RunnerDevice& cuda_runner_device();

// A staged tensor's `data`: which of the runner's device arenas, and the offset in it.
inline constexpr int kArenaShift = 48;
inline void* encode_arena_offset(size_t arena, size_t offset) {
  return reinterpret_cast<void*>((static_cast<uintptr_t>(arena) << kArenaShift) | offset);
}

// Entries a runner can hold besides a loaded library: a call that only sets one word on the device (the
// overhead every call pays, measured and subtracted alike) and the cuBLAS SGEMM baseline.
int overhead_entry(const kiln_args* args);
int cublas_sgemm_entry(const kiln_args* args);
// Whether a case's tensors are what cublas_sgemm_entry multiplies (fp32 A[M,K], B[K,N], C[M,N]).
Status check_sgemm(const eval::TensorSet& s);

// Whether KILN_LOG_ARENAS=1: the evaluator logs each contestant's runner and each runner where it mapped
// its arenas (an offset between contestants that follows the mapping shows there).
bool log_arenas();

}  // namespace kiln::cuda
