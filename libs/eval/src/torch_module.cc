#include "kiln/eval/torch_module.h"

#include <memory>
#include <nlohmann/json.hpp>

namespace kiln::eval {
namespace {

nlohmann::json tensors_json(const std::vector<task::TensorSpec>& tensors) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& t : tensors) {
    list.push_back(
        {{"name", t.name}, {"param", t.param}, {"dtype", std::string(task::dtype_name(t.dtype))}, {"shape", t.shape}});
  }
  return list;
}

nlohmann::json cases_json(const task::TaskSpec& spec) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto* cases : {&spec.correctness_cases, &spec.benchmark_cases}) {
    for (const task::Dims& dims : *cases) {
      nlohmann::json one = nlohmann::json::object();
      for (const auto& [name, value] : dims) one[name] = value;
      list.push_back(std::move(one));
    }
  }
  return list;
}

}  // namespace

bool is_torch_baseline(const std::string& name) { return name == kTorchEager || name == kTorchCompile; }

bool uses_torch(const task::TaskSpec& spec) {
  if (spec.torch_reference()) return true;
  for (const auto& b : spec.baselines)
    if (is_torch_baseline(b)) return true;
  return false;
}

Result<RunnerKernel> torch_kernel(const task::TaskSpec& spec, const std::string& interpreter,
                                  const TorchContestant& who) {
  if (spec.torch_source.empty()) return invalid_argument(who.name + ": the task has no PyTorch module (reference.py)");
  if (interpreter.empty())
    return failed_precondition(who.name +
                               ": the task's PyTorch module needs a Python with torch, and this evaluator has none "
                               "(tester.python)");
  nlohmann::json cfg = {
      {"file", task::TaskSpec::kTorchReferenceFile},
      {"source", spec.torch_source},
      {"device", who.device},
      {"compile", who.compile},
      {"arena_shift", who.arena_shift},
      {"inputs", tensors_json(spec.inputs)},
      {"outputs", tensors_json(spec.outputs)},
      {"cases", cases_json(spec)},
  };
  RunnerKernel k;
  k.name = who.name;
  k.python = std::make_shared<PythonKernel>(PythonKernel{interpreter, cfg.dump(), who.compile});
  return k;
}

}  // namespace kiln::eval
