// The evaluation protocol of DESIGN §5 on a CUDA GPU, with the same rules and verdicts as the CPU one
// (libs/eval). Every contestant (candidate, reference, each baseline) runs in a runner process with a CUDA
// context of its own, forked before the evaluator touches CUDA; the evaluator owns one device arena per
// contestant, shared with that runner alone through CUDA IPC, and the inputs, the clock, the comparison
// and the verdict. Correctness: inputs generated on the host from the seed and uploaded, outputs poisoned
// with NaN, candidate -> reference on its own copy -> poison -> candidate again, comparison on the host,
// inputs checked unchanged. Timing: interleaved rounds of calls timed on the evaluator's clock from
// continuing a stopped runner to its answer (the runner synchronizes its whole device first) plus a probe
// of the device from the evaluator's context, minus the same cost measured on an empty runner; before
// every round a block of every input changes on the device (the same for every contestant), timed outputs
// are compared with the reference's of the same round at unpredictable rounds, tensors move in the arena
// between blocks of rounds, and the L2 is flushed before each call in cold mode. Then the inputs are
// refilled and checked once more. A GPU fault of the candidate ends its runner's context, not the
// evaluator's.
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
