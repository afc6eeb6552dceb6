// Vendor baselines timed beside the reference (task.yaml `baselines`), internal.
#pragma once

#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/eval/tensor.h"

namespace kiln::eval::detail {

struct Baseline {
  const char* name;
  // Whether the task's tensors fit what the library call expects, with the reason if not.
  Status (*check)(const std::vector<HostTensor>& inputs, const std::vector<HostTensor>& outputs);
  // The call itself, on the tensors of a kiln_args (it runs in a runner, like every contestant).
  void (*run)(const kiln_args* args);
};

// nullptr for a name this build does not know.
const Baseline* find_baseline(const std::string& name);
std::string known_baselines();  // "openblas_sgemm"

}  // namespace kiln::eval::detail
