// The evaluation protocol of DESIGN §5 on a CUDA GPU: kiln::eval::run_protocol() on the CUDA device
// (src/cuda_device.h), so its rules and verdicts are the CPU evaluator's. Every contestant (candidate,
// reference, each baseline) runs in a runner process with a CUDA context of its own; the evaluator owns
// the device memory they work on, the inputs, the clock, the comparison and the verdict. A GPU fault of
// the candidate ends its runner's context, not the evaluator's.
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
Result<proto::TestReport> evaluate(const task::TaskSpec& spec, const eval::Candidate& candidate,
                                   const eval::Candidate& reference, const eval::EvalOptions& options);

// backend "cuda", the GPU's name, uuid, driver and runtime versions, and (through NVML, when present) its
// SM clock and temperature now.
proto::WorkerInfo cuda_worker_info();

// The baselines this build can time on a GPU (task.yaml `baselines`): "cublas_sgemm".
bool is_known_baseline(const std::string& name);

}  // namespace kiln::cuda
