// PyTorch contestants (kiln/eval/torch_module.h): a task whose reference is a KernelBench-format module,
// run by the system's python3 with torch, under the same protocol as a C reference.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "kernels.h"
#include "kiln/eval/eval.h"
#include "kiln/eval/torch_module.h"
#include "kiln/task/task.h"
#include "kiln/testing/skip.h"
#include "kiln/testing/test_status.h"
#include "kiln/testing/torch.h"

using kiln::eval::EvalOptions;
using kiln::eval::testing::build_kernel;
using kiln::task::TaskSpec;
using kiln::testing::have_torch;
using status = kiln::proto::TestStatus;

namespace {

// y = relu(x @ W^T + b): a Linear layer whose weight and bias the candidate gets as inputs.
constexpr const char* kLinearYaml = R"YAML(name: linear_relu
backend: cpu
dtype: fp32
inputs:
  - {name: x, dtype: fp32, shape: [batch_size, in_features], init: normal}
  - {name: weight, dtype: fp32, shape: [out_features, in_features], init: "uniform(-0.2, 0.2)", param: fc.weight}
  - {name: bias, dtype: fp32, shape: [out_features], init: "uniform(-0.2, 0.2)", param: fc.bias}
outputs:
  - {name: y, dtype: fp32, shape: [batch_size, out_features]}
correctness:
  cases: [{batch_size: 3, in_features: 5, out_features: 7}, {batch_size: 16, in_features: 64, out_features: 33}]
  seeds: 2
  rtol: 1.0e-4
  atol: 1.0e-5
benchmark:
  cases: [{batch_size: 64, in_features: 256, out_features: 128}]
)YAML";

const std::string kLinearModule = kiln::testing::linear_relu_module(128, 512, 256);

std::string linear_kernel(const std::string& activation) {
  return R"(#include <cstdint>
#include "kiln/kernel_abi.h"
// [EVOLVE_START]
// [EVOLVE_END]
extern "C" KILN_EXPORT int kiln_entry(const kiln_args* a) {
  const float* x = static_cast<const float*>(a->inputs[0].data);
  const float* w = static_cast<const float*>(a->inputs[1].data);
  const float* b = static_cast<const float*>(a->inputs[2].data);
  float* y = static_cast<float*>(a->outputs[0].data);
  const int64_t n = a->inputs[0].shape[0], k = a->inputs[0].shape[1], m = a->inputs[1].shape[0];
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      float s = b[j];
      for (int64_t p = 0; p < k; ++p) s += x[i * k + p] * w[j * k + p];
      y[i * m + j] = )" +
         activation + R"(;
    }
  return 0;
}
)";
}

TaskSpec linear_task(const std::string& yaml = kLinearYaml, const std::string& module = kLinearModule) {
  kiln::proto::FileMap files;
  files["task.yaml"] = kiln::proto::Bytes{yaml};
  files["reference.py"] = kiln::proto::Bytes{module};
  files["kernel.cpp"] = kiln::proto::Bytes{linear_kernel("s > 0 ? s : 0")};
  auto spec = kiln::task::parse_task(files);
  REQUIRE(spec.is_ok());
  return *spec;
}

EvalOptions options(bool measure) {
  EvalOptions o;
  o.python = "/usr/bin/python3";
  o.measure = measure;
  o.timing.mode = "warm";
  o.timing.min_samples = 5;
  o.timing.min_time_s = 0.02;
  o.timing.max_time_s = 0.5;
  o.timing.warmup_iters = 1;
  return o;
}

kiln::proto::TestReport evaluate(const TaskSpec& spec, const std::string& name, const std::string& activation,
                                 const EvalOptions& o) {
  const std::string path = build_kernel(name, linear_kernel(activation));
  REQUIRE(!path.empty());
  auto report = kiln::eval::evaluate(spec, kiln::eval::Candidate{path, nullptr}, nullptr, o);
  REQUIRE(report.is_ok());
  return *report;
}

}  // namespace

TEST_CASE("a task whose reference is a PyTorch module parses with its parameters as inputs", "[torch]") {
  const TaskSpec spec = linear_task();
  CHECK(spec.torch_reference());
  CHECK(spec.reference_file == "reference.py");
  REQUIRE(spec.inputs.size() == 3);
  CHECK(spec.inputs[0].param.empty());
  CHECK(spec.inputs[1].param == "fc.weight");
  CHECK(spec.inputs[2].param == "fc.bias");
}

TEST_CASE("a module parameter or a torch baseline without reference.py is refused with the key", "[torch]") {
  kiln::proto::FileMap files;
  files["task.yaml"] = kiln::proto::Bytes{kLinearYaml};
  files["reference.cpp"] = kiln::proto::Bytes{linear_kernel("s")};
  files["kernel.cpp"] = kiln::proto::Bytes{linear_kernel("s")};
  auto spec = kiln::task::parse_task(files);
  REQUIRE_FALSE(spec.is_ok());
  CHECK_THAT(spec.status().message(), Catch::Contains("inputs[1].param") && Catch::Contains("no reference.py"));
  std::string yaml = kLinearYaml;
  yaml = yaml.substr(0, yaml.find("  - {name: weight")) + yaml.substr(yaml.find("outputs:"));
  files["task.yaml"] = kiln::proto::Bytes{yaml + "baselines: [torch_eager]\n"};
  spec = kiln::task::parse_task(files);
  REQUIRE_FALSE(spec.is_ok());
  CHECK_THAT(spec.status().message(), Catch::Contains("baselines[0]") && Catch::Contains("torch_eager"));
}

TEST_CASE("a correct kernel passes against a PyTorch reference and is timed against it", "[torch]") {
  if (!have_torch()) KILN_SKIP("python3 has no torch here");
  const auto report = evaluate(linear_task(), "linear_ok", "s > 0 ? s : 0", options(true));
  INFO(report.message);
  CHECK(report.status == status::kOk);
  REQUIRE(report.performance.cases.size() == 1);
  CHECK(report.performance.cases[0].reference.median_us > 0);
  CHECK(report.performance.cases[0].candidate.median_us > 0);
}

TEST_CASE("a wrong kernel fails against a PyTorch reference, on the parameters the candidate was given", "[torch]") {
  if (!have_torch()) KILN_SKIP("python3 has no torch here");
  // Without the relu: differs wherever the product is negative.
  auto report = evaluate(linear_task(), "linear_no_relu", "s", options(false));
  CHECK(report.status == status::kMismatch);
  // The bias ignored: differs everywhere the module's own (drawn) bias is not zero.
  report = evaluate(linear_task(), "linear_no_bias", "(s - b[j]) > 0 ? (s - b[j]) : 0", options(false));
  CHECK(report.status == status::kMismatch);
}

TEST_CASE("a PyTorch reference that fails is the evaluator's problem, with the module's error", "[torch]") {
  if (!have_torch()) KILN_SKIP("python3 has no torch here");
  std::string broken = kLinearModule;
  broken.replace(broken.find("return torch.relu"), 17, "return torch.nosuchop");
  auto report =
      kiln::eval::evaluate(linear_task(kLinearYaml, broken),
                           kiln::eval::Candidate{build_kernel("linear_ok", linear_kernel("s > 0 ? s : 0")), nullptr},
                           nullptr, options(false));
  REQUIRE_FALSE(report.is_ok());
  CHECK_THAT(report.status().message(), Catch::Contains("nosuchop"));

  std::string unloadable = std::string("import no_such_module_here\n") + kLinearModule;
  report =
      kiln::eval::evaluate(linear_task(kLinearYaml, unloadable),
                           kiln::eval::Candidate{build_kernel("linear_ok", linear_kernel("s > 0 ? s : 0")), nullptr},
                           nullptr, options(false));
  REQUIRE_FALSE(report.is_ok());
  CHECK_THAT(report.status().message(), Catch::Contains("no_such_module_here"));
}

TEST_CASE("without a Python the PyTorch reference cannot be evaluated here, and says so", "[torch]") {
  EvalOptions o = options(false);
  o.python = "";
  auto report = kiln::eval::evaluate(
      linear_task(), kiln::eval::Candidate{build_kernel("linear_ok", linear_kernel("s > 0 ? s : 0")), nullptr}, nullptr,
      o);
  REQUIRE_FALSE(report.is_ok());
  CHECK_THAT(report.status().message(), Catch::Contains("tester.python"));
  o.python = "/no/such/python3";
  report = kiln::eval::evaluate(
      linear_task(), kiln::eval::Candidate{build_kernel("linear_ok", linear_kernel("s > 0 ? s : 0")), nullptr}, nullptr,
      o);
  REQUIRE_FALSE(report.is_ok());
  CHECK_THAT(report.status().message(), Catch::Contains("/no/such/python3"));
}

TEST_CASE("torch_eager times the task's module beside a C reference", "[torch]") {
  if (!have_torch()) KILN_SKIP("python3 has no torch here");
  kiln::proto::FileMap files;
  files["task.yaml"] = kiln::proto::Bytes{std::string(kLinearYaml) + "baselines: [torch_eager]\n"};
  files["reference.py"] = kiln::proto::Bytes{kLinearModule};
  files["reference.cpp"] = kiln::proto::Bytes{linear_kernel("s > 0 ? s : 0")};
  files["kernel.cpp"] = kiln::proto::Bytes{linear_kernel("s > 0 ? s : 0")};
  auto spec = kiln::task::parse_task(files);
  REQUIRE(spec.is_ok());
  CHECK_FALSE(spec->torch_reference());
  const std::string ref = build_kernel("linear_ref", linear_kernel("s > 0 ? s : 0"));
  auto lib = kiln::eval::KernelLibrary::open(ref);
  REQUIRE(lib.is_ok());
  auto report = kiln::eval::evaluate(
      *spec, kiln::eval::Candidate{build_kernel("linear_ok", linear_kernel("s > 0 ? s : 0")), nullptr}, lib->entry(),
      options(true));
  REQUIRE(report.is_ok());
  INFO(report->message);
  CHECK(report->status == status::kOk);
  REQUIRE(report->performance.cases.size() == 1);
  REQUIRE(report->performance.cases[0].baselines.size() == 1);
  CHECK(report->performance.cases[0].baselines[0].name == "torch_eager");
  CHECK(report->performance.cases[0].baselines[0].stats.median_us > 0);
}
