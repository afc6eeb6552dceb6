// The CUDA backend on a real GPU: every bundled CUDA task's program 0 is correct, a fault or a hang of a
// candidate becomes a result and the tester keeps serving, the CUDA cheats are caught, and an A/A run's
// speedup interval holds 1.0. Each test skips unless KILN_GPU_TESTS=1.
#include <prometheus/registry.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "kiln/compiler/handler.h"
#include "kiln/core/files.h"
#include "kiln/cuda/nvml.h"
#include "kiln/task/task.h"
#include "kiln/tester/gpu_monitor.h"
#include "kiln/tester/handler.h"

namespace {

bool gpu_tests_enabled() {
  const char* v = std::getenv("KILN_GPU_TESTS");
  return v && std::string(v) == "1";
}

#define KILN_REQUIRE_GPU_TESTS()                                           \
  do {                                                                     \
    if (!gpu_tests_enabled()) {                                            \
      WARN("KILN_GPU_TESTS is not 1: GPU test skipped");                   \
      return;                                                              \
    }                                                                      \
  } while (0)

kiln::proto::FileMap task_files(const std::string& name) {
  auto files = kiln::task::load_package(std::string(KILN_SOURCE_DIR "/configs/tasks/") + name);
  REQUIRE(files.is_ok());
  return *files;
}

// A compiler and a CUDA tester, as the services run them.
struct Rig {
  kiln::TempDir cache{"kiln-gpu-test"};
  std::unique_ptr<kiln::compiler::CompileHandler> compiler;
  std::unique_ptr<kiln::tester::TestHandler> tester;

  explicit Rig(double timeout_s = 120, double min_time_s = 0.2, std::optional<bool> readonly_root = {},
               std::optional<bool> deny_process_creation = {}) {
    kiln::compiler::CompilerOptions c;
    c.cache_dir = cache.path() + "/cache";
    auto ch = kiln::compiler::CompileHandler::create(c, std::make_shared<prometheus::Registry>());
    REQUIRE(ch.is_ok());
    compiler = std::move(ch).value();
    kiln::tester::TesterOptions t;
    t.backend = "cuda";
    t.eval_binary = KILN_BINARY_DIR "/bin/kiln-eval-cuda";
    t.timeout_s = timeout_s;
    t.timing.min_time_s = min_time_s;
    t.timing.max_time_s = 5;
    t.worker_id = "gpu-test";
    t.readonly_root = readonly_root;
    t.deny_process_creation = deny_process_creation;
    auto th = kiln::tester::TestHandler::create(t);
    INFO(th.status().message());
    REQUIRE(th.is_ok());
    tester = std::move(th).value();
  }

  // Builds `code` (program 0 when empty) against the task's reference and evaluates it.
  kiln::proto::TestReport evaluate(const std::string& task, const std::string& code = {},
                                   const std::map<std::string, std::string>& params = {}) {
    kiln::proto::FileMap files = task_files(task);
    kiln::proto::CompileRequest req;
    req.cand.campaign_id = "gpu-test";
    req.cand.program_id = task + "/p" + std::to_string(++programs_);
    req.cand.code = code.empty() ? files.at("kernel.cu").data : code;
    req.cand.params = params;
    req.backend = "cuda";
    req.arch = "sm_90";
    req.files = files;
    auto out = compiler->compile(req);
    REQUIRE(out.next.size() == 1);
    if (out.next[0].service != "test.cuda") {
      auto failed = kiln::proto::decode<kiln::proto::ScoreResult>(out.next[0].payload.data);
      FAIL("build failed: " << (failed.is_ok() ? failed->error : std::string("?")));
    }
    auto test = kiln::proto::decode<kiln::proto::TestRequest>(out.next[0].payload.data);
    REQUIRE(test.is_ok());
    auto report = tester->evaluate(*test);
    INFO(report.status().message());
    REQUIRE(report.is_ok());
    return std::move(report).value();
  }

  int programs_ = 0;
};

std::string summary(const kiln::proto::TestReport& r) {
  return r.status + ": " + r.message + "\n--- log ---\n" + r.log;
}

// A reduce_sum candidate whose body is `body` (a kernel and a kiln_entry using it).
std::string reduce_candidate(const std::string& body) {
  return "#include \"kiln/kernel_abi.h\"\n" + body;
}

}  // namespace

TEST_CASE("every bundled CUDA task's program 0 is correct and timed with CUDA events", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig rig;
  for (const char* task : {"cuda_rmsnorm", "cuda_softmax", "cuda_sgemm", "cuda_reduce_sum", "cuda_transpose"}) {
    auto r = rig.evaluate(task);
    INFO(task << ": " << summary(r));
    CHECK(r.status == "ok");
    CHECK(r.performance.measured);
    CHECK(r.performance.method == "cuda_events");
    CHECK(r.performance.mode == "cold");
    CHECK(r.worker.backend == "cuda");
    CHECK(r.worker.device_name.find("NVIDIA") != std::string::npos);
    CHECK(r.worker.gpu_uuid.rfind("GPU-", 0) == 0);
    CHECK(!r.worker.driver_version.empty());
    CHECK(!r.worker.runtime_version.empty());
    if (!r.performance.cases.empty()) {
      const auto& c = r.performance.cases[0];
      WARN(task << ": candidate " << c.candidate.median_us << " us, reference " << c.reference.median_us
                << " us, speedup " << c.speedup << " [" << c.speedup_lo << ", " << c.speedup_hi << "]");
      CHECK(c.candidate.n >= 10);
      if (std::string(task) == "cuda_sgemm") {
        REQUIRE(c.baselines.size() == 1);
        CHECK(c.baselines[0].name == "cublas_sgemm");
        CHECK(c.baselines[0].stats.median_us > 0);
      }
    }
  }
}

TEST_CASE("an out-of-bounds kernel becomes crashed with the CUDA error, and the tester keeps serving", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig rig;
  auto r = rig.evaluate("cuda_reduce_sum", reduce_candidate(R"(
__global__ void wild(float* y) { y[threadIdx.x * (1ll << 34)] = 1.f; }
extern "C" KILN_EXPORT int kiln_entry(const kiln_args* a) {
  wild<<<1, 32, 0, (cudaStream_t)a->stream>>>((float*)a->outputs[0].data);
  return 0;
}
)"));
  INFO(summary(r));
  CHECK(r.status == "crashed");
  CHECK((r.message.find("cudaErrorIllegalAddress") != std::string::npos ||
         r.message.find("cudaErrorLaunchFailure") != std::string::npos));
  auto again = rig.evaluate("cuda_reduce_sum");
  INFO(summary(again));
  CHECK(again.status == "ok");
}

TEST_CASE("a kernel that never ends becomes timed_out, and the tester keeps serving", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig rig(/*timeout_s=*/15);
  auto r = rig.evaluate("cuda_reduce_sum", reduce_candidate(R"(
__global__ void forever(float* y, volatile int* flag) { while (*flag == 0) { } y[0] = 0.f; }
extern "C" KILN_EXPORT int kiln_entry(const kiln_args* a) {
  // Spins on a device word that nothing ever sets (volatile, so the loop cannot be optimized away).
  static int* flag = nullptr;
  if (!flag) { cudaMalloc(&flag, sizeof(int)); cudaMemset(flag, 0, sizeof(int)); }
  forever<<<1, 1, 0, (cudaStream_t)a->stream>>>((float*)a->outputs[0].data, flag);
  return 0;
}
)"));
  INFO(summary(r));
  CHECK(r.status == "timed_out");
  auto again = rig.evaluate("cuda_reduce_sum");
  INFO(summary(again));
  CHECK(again.status == "ok");
}

TEST_CASE("cheat: work left running on another stream is part of the measured time", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig rig(120, /*min_time_s=*/0.5);
  // The reference's own single-block reduction, launched on a private stream: kiln_entry returns at once.
  // Timed on the dedicated stream alone it would look hundreds of times faster than the reference.
  auto r = rig.evaluate("cuda_reduce_sum", reduce_candidate(R"(
__global__ void slow_sum(const float* x, float* y, long long n) {
  __shared__ double partial[256];
  double sum = 0;
  for (long long i = threadIdx.x; i < n; i += 256) sum += x[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = 128; s > 0; s /= 2) { if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s]; __syncthreads(); }
  if (threadIdx.x == 0) y[0] = (float)partial[0];
}
extern "C" KILN_EXPORT int kiln_entry(const kiln_args* a) {
  static cudaStream_t side = nullptr;
  if (!side) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  slow_sum<<<1, 256, 0, side>>>((const float*)a->inputs[0].data, (float*)a->outputs[0].data, a->inputs[0].shape[0]);
  return 0;
}
)"));
  INFO(summary(r));
  REQUIRE(r.status == "ok");  // the work is done and right: only its time is hidden
  REQUIRE(r.performance.cases.size() == 1);
  const auto& c = r.performance.cases[0];
  WARN("other-stream cheat: speedup " << c.speedup << " [" << c.speedup_lo << ", " << c.speedup_hi << "]");
  CHECK(c.speedup < 1.10);
  CHECK(c.speedup_lo < 1.10);
}

TEST_CASE("cheat: output left in device memory by an earlier launch is caught by the poisoning", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig rig;
  // Computes once, then returns without launching anything: the buffers are the same, the result would be.
  auto r = rig.evaluate("cuda_transpose", R"(#include "kiln/kernel_abi.h"
__global__ void tr(const float* x, float* y, long long rows, long long cols) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < rows * cols) y[(i % cols) * rows + i / cols] = x[i];
}
extern "C" KILN_EXPORT int kiln_entry(const kiln_args* a) {
  static const void* done_for = nullptr;
  if (done_for == a->outputs[0].data) return 0;  // "still there from last time"
  done_for = a->outputs[0].data;
  long long rows = a->inputs[0].shape[0], cols = a->inputs[0].shape[1];
  tr<<<(unsigned)((rows * cols + 255) / 256), 256, 0, (cudaStream_t)a->stream>>>(
      (const float*)a->inputs[0].data, (float*)a->outputs[0].data, rows, cols);
  return 0;
}
)");
  INFO(summary(r));
  CHECK(r.status != "ok");
  CHECK(r.status == "nonfinite");
}

TEST_CASE("A/A: the reference timed as the candidate has a speedup interval containing 1.0", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig rig(120, /*min_time_s=*/0.5);
  auto files = task_files("cuda_transpose");
  auto r = rig.evaluate("cuda_transpose", files.at("reference.cu").data);
  INFO(summary(r));
  REQUIRE(r.status == "ok");
  REQUIRE(r.performance.cases.size() == 1);
  const auto& c = r.performance.cases[0];
  WARN("A/A: speedup " << c.speedup << " [" << c.speedup_lo << ", " << c.speedup_hi << "], n " << c.candidate.n);
  CHECK(c.speedup_lo <= 1.0);
  CHECK(c.speedup_hi >= 1.0);
}

TEST_CASE("NVML gauges of the tester's GPU appear on its registry", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  auto nvml = kiln::cuda::Nvml::load();
  REQUIRE(nvml.is_ok());
  auto gpu = kiln::cuda::select_gpu(**nvml, -1, std::getenv("CUDA_VISIBLE_DEVICES"));
  REQUIRE(gpu.is_ok());
  CHECK(gpu->arch() == "sm_90");
  auto registry = std::make_shared<prometheus::Registry>();
  kiln::tester::GpuMonitor monitor(*nvml, *gpu, registry);
  monitor.poll_once();
  std::map<std::string, double> seen;
  for (const auto& family : registry->Collect()) {
    for (const auto& m : family.metric) {
      for (const auto& label : m.label) {
        if (label.name == "gpu_uuid" && label.value == gpu->uuid) seen[family.name] = m.gauge.value;
      }
    }
  }
  for (const char* name : {"kiln_gpu_utilization_ratio", "kiln_gpu_memory_used_bytes", "kiln_gpu_power_watts",
                           "kiln_gpu_temperature_celsius", "kiln_gpu_sm_clock_hertz"}) {
    INFO(name);
    CHECK(seen.count(name) == 1);
  }
  CHECK(seen["kiln_gpu_memory_used_bytes"] > 0);
  CHECK(seen["kiln_gpu_sm_clock_hertz"] > 1e8);
}

TEST_CASE("the CUDA child runs without process creation, and a read-only root breaks the CUDA runtime", "[gpu]") {
  // The tester's defaults for CUDA follow from this: deny_process_creation on, readonly_root off. If the
  // second check ever fails, the runtime has learnt to live under a read-only root: turn it on.
  KILN_REQUIRE_GPU_TESTS();
  for (auto [ro, nofork] : {std::pair{true, false}, std::pair{false, true}}) {
    Rig rig(120, 0.05, ro, nofork);
    auto r = rig.evaluate("cuda_transpose");
    std::printf("  sandbox readonly_root=%d deny_process_creation=%d: %s: %s\n", ro, nofork, r.status.c_str(),
                r.message.substr(0, 160).c_str());
    if (nofork) {
      CHECK(r.status == kiln::proto::test_status::kOk);
    } else {
      CHECK(r.status == kiln::proto::test_status::kLoadFailed);
      CHECK(r.message.find("cudaErrorOperatingSystem") != std::string::npos);
    }
  }
}
