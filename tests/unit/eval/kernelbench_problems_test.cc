// The KernelBench-format problems shipped in configs/kernelbench: each parses as a CPU task whose reference
// is its reference.py, with one editable region and template parameters, and its program 0 (the default
// parameters) is correct against the PyTorch module, run by the system's python3 with torch.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include "kernels.h"
#include "kiln/eval/eval.h"
#include "kiln/task/task.h"
#include "kiln/testing/skip.h"
#include "kiln/testing/test_status.h"
#include "kiln/testing/torch.h"

using kiln::eval::testing::build_kernel;
using kiln::testing::have_torch;
using status = kiln::proto::TestStatus;

namespace {

const std::string kProblemsDir = KILN_SOURCE_DIR "/configs/kernelbench/";

// Level-1 kinds: matmul, an activation, a norm with affine parameters, a reduction, softmax, conv2d with
// weights, pooling, a scan, a loss with int64 targets, attention.
const std::set<std::string> kProblems = {"kb_matmul",        "kb_gelu",     "kb_layernorm", "kb_sum_reduce",
                                         "kb_softmax",       "kb_conv2d",   "kb_maxpool2d", "kb_cumsum",
                                         "kb_cross_entropy", "kb_attention"};

struct Problem {
  kiln::task::TaskSpec spec;
  kiln::proto::FileMap files;
};

Problem load(const std::string& name) {
  auto files = kiln::task::load_package(kProblemsDir + name);
  INFO(name << ": " << files.status().to_string());
  REQUIRE(files.is_ok());
  auto spec = kiln::task::parse_task(*files);
  INFO(name << ": " << spec.status().to_string());
  REQUIRE(spec.is_ok());
  return Problem{*spec, *files};
}

// Program 0 with `defines` (or its defaults), evaluated for correctness only against the PyTorch module.
kiln::proto::TestReport check(const Problem& p, const std::string& kernel_source, const std::string& tag) {
  const std::string so = build_kernel(p.spec.name + tag, kernel_source);
  REQUIRE(!so.empty());
  kiln::eval::EvalOptions options;
  options.python = "/usr/bin/python3";
  options.measure = false;
  auto report = kiln::eval::evaluate(p.spec, kiln::eval::Candidate{so, nullptr}, nullptr, options);
  INFO(p.spec.name << ": " << report.status().to_string());
  REQUIRE(report.is_ok());
  return *report;
}

void program0_is_correct(const std::string& name) {
  if (!have_torch()) KILN_SKIP("/usr/bin/python3 has no torch here");
  const Problem p = load(name);
  const auto report = check(p, p.files.at(p.spec.kernel_file).data, "_p0");
  INFO(name << ": " << report.message);
  CHECK(report.status == status::kOk);
  CHECK(report.correctness.tested_shapes.size() == p.spec.correctness_cases.size());
}

// `kernel` with its first `from` replaced by `to` (which must be there).
std::string edited(const std::string& kernel, const std::string& from, const std::string& to) {
  const auto at = kernel.find(from);
  REQUIRE(at != std::string::npos);
  std::string out = kernel;
  out.replace(at, from.size(), to);
  return out;
}

}  // namespace

TEST_CASE("the bundled KernelBench problems parse as CPU tasks with a PyTorch reference and parameters",
          "[kernelbench]") {
  std::set<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(kProblemsDir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.rfind("kb_", 0) == 0 && name.find("_cuda") == std::string::npos)
      found.insert(name);
  }
  CHECK(found == kProblems);
  for (const std::string& name : kProblems) {
    INFO(name);
    const Problem p = load(name);
    CHECK(p.spec.name == name);
    CHECK(p.spec.backend == kiln::proto::Backend::kCpu);
    CHECK(p.spec.torch_reference());
    CHECK(p.spec.reference_file == "reference.py");
    CHECK(p.files.count("reference.cpp") == 0);
    CHECK(p.spec.kernel_file == "kernel.cpp");
    CHECK_FALSE(p.spec.instructions.empty());
    CHECK_FALSE(p.spec.params.empty());
    auto regions = kiln::task::find_regions(p.files.at(p.spec.kernel_file).data);
    REQUIRE(regions.is_ok());
    CHECK(regions->size() == 1);
    // KernelBench's format: the module, its inputs and its constructor's arguments.
    const std::string& module = p.files.at("reference.py").data;
    for (const char* part : {"class Model(nn.Module)", "def get_inputs()", "def get_init_inputs()"})
      CHECK(module.find(part) != std::string::npos);
    // Every dim a case sets is a module-level constant of reference.py (the evaluator sets them there).
    for (const auto& dims : p.spec.benchmark_cases)
      for (const auto& [dim, value] : dims) CHECK(module.find("\n" + dim + " = ") != std::string::npos);
  }
}

TEST_CASE("the KernelBench problems with module parameters and integer targets pass them as inputs", "[kernelbench]") {
  const Problem ln = load("kb_layernorm");
  REQUIRE(ln.spec.inputs.size() == 3);
  CHECK(ln.spec.inputs[1].param == "ln.weight");
  CHECK(ln.spec.inputs[2].param == "ln.bias");
  const Problem conv = load("kb_conv2d");
  REQUIRE(conv.spec.inputs.size() == 3);
  CHECK(conv.spec.inputs[1].param == "conv.weight");
  CHECK(conv.spec.inputs[2].param == "conv.bias");
  const Problem ce = load("kb_cross_entropy");
  REQUIRE(ce.spec.inputs.size() == 2);
  CHECK(ce.spec.inputs[1].dtype == kiln::task::DType::kI64);
  REQUIRE(ce.spec.outputs.size() == 1);
  CHECK(ce.spec.outputs[0].shape.empty());  // the mean loss, a 0-d tensor
}

TEST_CASE("kb_matmul: program 0 is correct against its PyTorch reference", "[kernelbench][torch]") {
  program0_is_correct("kb_matmul");
}
TEST_CASE("kb_gelu: program 0 is correct against its PyTorch reference", "[kernelbench][torch]") {
  program0_is_correct("kb_gelu");
}
TEST_CASE("kb_layernorm: program 0 is correct against its PyTorch reference", "[kernelbench][torch]") {
  program0_is_correct("kb_layernorm");
}
TEST_CASE("kb_sum_reduce: program 0 is correct against its PyTorch reference", "[kernelbench][torch]") {
  program0_is_correct("kb_sum_reduce");
}
TEST_CASE("kb_softmax: program 0 is correct against its PyTorch reference", "[kernelbench][torch]") {
  program0_is_correct("kb_softmax");
}
TEST_CASE("kb_conv2d: program 0 is correct against its PyTorch reference", "[kernelbench][torch]") {
  program0_is_correct("kb_conv2d");
}
TEST_CASE("kb_maxpool2d: program 0 is correct against its PyTorch reference", "[kernelbench][torch]") {
  program0_is_correct("kb_maxpool2d");
}
TEST_CASE("kb_cumsum: program 0 is correct against its PyTorch reference", "[kernelbench][torch]") {
  program0_is_correct("kb_cumsum");
}
TEST_CASE("kb_cross_entropy: program 0 is correct against its PyTorch reference", "[kernelbench][torch]") {
  program0_is_correct("kb_cross_entropy");
}
TEST_CASE("kb_attention: program 0 is correct against its PyTorch reference", "[kernelbench][torch]") {
  program0_is_correct("kb_attention");
}

TEST_CASE("a KernelBench program that ignores the module's affine parameters or the targets fails",
          "[kernelbench][torch]") {
  if (!have_torch()) KILN_SKIP("/usr/bin/python3 has no torch here");
  // The bias left out: the module's (drawn) bias is not zero, so every element differs.
  const Problem ln = load("kb_layernorm");
  auto report = check(ln, edited(ln.files.at("kernel.cpp").data, "* w[c] + b[c]", "* w[c]"), "_nobias");
  CHECK(report.status == status::kMismatch);
  // Every row's loss taken at class 0 instead of its target.
  const Problem ce = load("kb_cross_entropy");
  report = check(ce, edited(ce.files.at("kernel.cpp").data, "- pr[t[b]]", "- pr[0]"), "_notarget");
  CHECK(report.status == status::kMismatch);
}

// Each problem's CUDA variant: the same module as its reference, a kernel.cu with an editable region and
// parameters, sized for a GPU (run on one by tests/gpu; here they must parse).
TEST_CASE("the KernelBench problems' CUDA variants parse with the same PyTorch module", "[kernelbench][cuda]") {
  for (const std::string& name : kProblems) {
    INFO(name);
    const Problem cpu = load(name);
    const Problem gpu = load(name + "_cuda");
    CHECK(gpu.spec.backend == kiln::proto::Backend::kCuda);
    CHECK(gpu.spec.torch_reference());
    CHECK(gpu.spec.kernel_file == "kernel.cu");
    CHECK_FALSE(gpu.spec.params.empty());
    auto regions = kiln::task::find_regions(gpu.files.at("kernel.cu").data);
    REQUIRE(regions.is_ok());
    CHECK(regions->size() == 1);
    REQUIRE(gpu.spec.inputs.size() == cpu.spec.inputs.size());
    for (size_t i = 0; i < cpu.spec.inputs.size(); ++i) {
      CHECK(gpu.spec.inputs[i].param == cpu.spec.inputs[i].param);
      CHECK(gpu.spec.inputs[i].dtype == cpu.spec.inputs[i].dtype);
    }
    CHECK(gpu.spec.correctness_cases == cpu.spec.correctness_cases);
  }
}
