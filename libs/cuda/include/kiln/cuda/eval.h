// The evaluation protocol of DESIGN §5 on a CUDA GPU, with the same rules and verdicts as the CPU one
// (libs/eval): inputs generated on the host from the seed and copied to the device, device outputs
// poisoned with NaN, candidate -> reference on copies -> poison -> candidate again, comparison on the host,
// inputs checked unchanged; then CUDA-event timing on a dedicated non-default stream, interleaved with the
// reference and the task's baselines, with a device-wide synchronize before each stop event and the L2
// flushed before each sample in cold mode; then the inputs are refilled and checked once more.
// It runs inside the sandboxed `kiln-eval-cuda` child: a GPU fault ends that process's context, not the
// tester.
#pragma once

#include <string>

#include "kiln/core/status.h"
#include "kiln/eval/eval.h"
#include "kiln/proto/payloads.h"
#include "kiln/task/task.h"

namespace kiln::cuda {

// Evaluates on the current CUDA device. An error means the task cannot be evaluated here (no GPU, an
// unknown baseline, a failing reference), not that the candidate is wrong: a candidate that faults becomes
// a report with status "crashed" naming the CUDA error.
Result<proto::TestReport> evaluate(const task::TaskSpec& spec, eval::KernelEntry candidate,
                                   eval::KernelEntry reference, const eval::EvalOptions& options);

// backend "cuda", the GPU's name, uuid, driver and runtime versions, and (through NVML, when present) its
// SM clock and temperature now.
proto::WorkerInfo cuda_worker_info();

// The baselines this build can time on a GPU (task.yaml `baselines`): "cublas_sgemm".
bool is_known_baseline(const std::string& name);

}  // namespace kiln::cuda
