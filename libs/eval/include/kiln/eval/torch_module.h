// PyTorch contestants. A task's reference.py (KernelBench's format: class Model(nn.Module),
// get_inputs(), get_init_inputs()) runs in a runner of its own (kiln/eval/runner.h: PythonKernel) under
// the same protocol as a C kernel: as the reference when the package has no C one, and as the
// `torch_eager` and `torch_compile` baselines. One module instance per case: the case's dims are set as
// the file's module-level names (the constants get_init_inputs() and get_inputs() read), then
// Model(*get_init_inputs()) is built with torch's seed 0. The inputs that task.yaml marks `param` replace
// the module's parameters and buffers of those names; the others are forward()'s arguments, in order.
#pragma once

#include <string>

#include "kiln/core/status.h"
#include "kiln/eval/runner.h"
#include "kiln/task/task.h"

namespace kiln::eval {

inline constexpr const char* kTorchEager = "torch_eager";
inline constexpr const char* kTorchCompile = "torch_compile";
bool is_torch_baseline(const std::string& name);
// Whether evaluating `spec` runs its PyTorch module: as the reference, or as a torch_* baseline.
bool uses_torch(const task::TaskSpec& spec);

struct TorchContestant {
  std::string name;      // "reference", "torch_eager", "torch_compile"
  bool compile = false;  // run through torch.compile
  std::string device;    // "cpu" | "cuda"
  int arena_shift = 0;   // cuda: how a staged tensor names its device arena (arena << shift | offset)
};

// The runner kernel of the task's module for `who`, run by `interpreter`; an error when the task has no
// module or there is no interpreter.
Result<RunnerKernel> torch_kernel(const task::TaskSpec& spec, const std::string& interpreter,
                                  const TorchContestant& who);

}  // namespace kiln::eval
