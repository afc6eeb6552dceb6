// The CPU task packages shipped in configs/tasks: each parses, program 0 and a tuned parameter choice
// are correct against the reference, and sgemm's OpenBLAS baseline is timed.
#include <catch2/catch.hpp>
#include <string>

#include "kernels.h"
#include "kiln/eval/eval.h"
#include "kiln/task/task.h"
#include "kiln/testing/test_status.h"

using kiln::eval::KernelLibrary;
using kiln::eval::testing::build_kernel;

namespace {

struct Bundled {
  std::string name;
  std::string tuned_defines;  // a parameter choice that should be well above program 0
};

kiln::task::TaskSpec load(const std::string& name, kiln::proto::FileMap& files) {
  auto loaded = kiln::task::load_package(KILN_SOURCE_DIR "/configs/tasks/" + name);
  INFO(loaded.status().to_string());
  REQUIRE(loaded.is_ok());
  files = *loaded;
  auto spec = kiln::task::parse_task(files);
  INFO(spec.status().to_string());
  REQUIRE(spec.is_ok());
  return *spec;
}

}  // namespace

TEST_CASE("bundled CPU tasks are correct for program 0 and a tuned choice", "[eval][tasks]") {
  for (const Bundled& t :
       {Bundled{"rmsnorm", "-DTHREADS=2 -DVEC=16"}, Bundled{"softmax", "-DTHREADS=2 -DVEC=8 -DSTORE_EXP=1"},
        Bundled{"sgemm", "-DTHREADS=2 -DTILE_M=16 -DTILE_N=64 -DTILE_K=64"}}) {
    INFO(t.name);
    kiln::proto::FileMap files;
    auto spec = load(t.name, files);
    CHECK(spec.backend == kiln::proto::Backend::kCpu);
    CHECK(spec.dtype == "fp32");
    CHECK_FALSE(spec.params.empty());
    CHECK_FALSE(spec.instructions.empty());
    auto regions = kiln::task::find_regions(files.at(spec.kernel_file).data);
    REQUIRE(regions.is_ok());
    CHECK(regions->size() == 1);

    auto ref = KernelLibrary::open(build_kernel(t.name + "_ref", files.at(spec.reference_file).data));
    REQUIRE(ref.is_ok());
    for (const std::string& defines : {std::string(), t.tuned_defines}) {
      auto cand = KernelLibrary::open(build_kernel(t.name + "_kernel", files.at(spec.kernel_file).data, defines));
      REQUIRE(cand.is_ok());
      kiln::eval::EvalOptions options;
      options.measure = false;
      auto report = kiln::eval::evaluate(spec, cand->entry(), ref->entry(), options);
      REQUIRE(report.is_ok());
      INFO(defines << ": " << report->message);
      CHECK(report->status == kiln::proto::TestStatus::kOk);
    }
  }
}

TEST_CASE("sgemm times the OpenBLAS baseline beside the reference", "[eval][tasks]") {
  kiln::proto::FileMap files;
  auto spec = load("sgemm", files);
  REQUIRE(spec.baselines == std::vector<std::string>{"openblas_sgemm"});
  spec.correctness_cases = {{{"M", 5}, {"N", 7}, {"K", 3}}};
  spec.benchmark_cases = {{{"M", 64}, {"N", 48}, {"K", 32}}};
  auto ref = KernelLibrary::open(build_kernel("sgemm_ref", files.at(spec.reference_file).data));
  auto cand = KernelLibrary::open(build_kernel("sgemm_kernel", files.at(spec.kernel_file).data));
  REQUIRE(ref.is_ok());
  REQUIRE(cand.is_ok());
  kiln::eval::EvalOptions options;
  options.timing.mode = "warm";
  options.timing.min_samples = 5;
  options.timing.min_time_s = 0.02;
  options.timing.max_time_s = 0.3;
  auto report = kiln::eval::evaluate(spec, cand->entry(), ref->entry(), options);
  REQUIRE(report.is_ok());
  INFO(report->message);
  CHECK(report->status == kiln::proto::TestStatus::kOk);
  REQUIRE(report->performance.cases.size() == 1);
  const auto& c = report->performance.cases[0];
  REQUIRE(c.baselines.size() == 1);
  CHECK(c.baselines[0].name == "openblas_sgemm");
  CHECK(c.baselines[0].stats.n == c.candidate.n);
  CHECK(c.baselines[0].speedup == Approx(c.baselines[0].stats.median_us / c.candidate.median_us));
}

TEST_CASE("a baseline that does not fit the task's tensors is an error", "[eval][tasks]") {
  kiln::proto::FileMap files;
  auto spec = load("rmsnorm", files);
  spec.baselines = {"openblas_sgemm"};
  spec.correctness_cases = {{{"B", 1}, {"H", 8}}};
  spec.benchmark_cases = {{{"B", 2}, {"H", 8}}};
  auto ref = KernelLibrary::open(build_kernel("rmsnorm_ref", files.at(spec.reference_file).data));
  REQUIRE(ref.is_ok());
  kiln::eval::EvalOptions options;
  options.timing.min_time_s = 0.01;
  auto report = kiln::eval::evaluate(spec, ref->entry(), ref->entry(), options);
  REQUIRE_FALSE(report.is_ok());
  CHECK(report.status().message().find("openblas_sgemm: expects fp32 inputs") != std::string::npos);
}

// The CUDA packages run on a GPU (tests/gpu); here they must at least parse, mark an editable region,
// and move enough bytes per benchmark call to measure bandwidth on an H200.
TEST_CASE("bundled CUDA task packages parse and are sized for a GPU", "[eval][tasks][cuda]") {
  for (const char* name : {"cuda_rmsnorm", "cuda_softmax", "cuda_sgemm", "cuda_reduce_sum", "cuda_transpose"}) {
    INFO(name);
    kiln::proto::FileMap files;
    auto spec = load(name, files);
    CHECK(spec.backend == kiln::proto::Backend::kCuda);
    CHECK(spec.kernel_file == "kernel.cu");
    CHECK(spec.reference_file == "reference.cu");
    const std::string& kernel = files.at("kernel.cu").data;
    CHECK(kernel.find("[EVOLVE_START]") != std::string::npos);
    CHECK(kernel.find("[EVOLVE_END]") != std::string::npos);
    CHECK(!spec.params.empty());
    REQUIRE(spec.benchmark_cases.size() == 1);
    int64_t bytes = 0;
    for (const auto* list : {&spec.inputs, &spec.outputs}) {
      for (const auto& t : *list) {
        auto shape = kiln::task::shape_for(t, spec.benchmark_cases[0]);
        REQUIRE(shape.is_ok());
        int64_t n = 1;
        for (int64_t d : *shape) n *= d;
        bytes += n * static_cast<int64_t>(kiln::task::dtype_bytes(t.dtype));
      }
    }
    if (spec.op != "sgemm") CHECK(bytes >= (int64_t{64} << 20));
  }
}
