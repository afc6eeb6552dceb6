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
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kiln/cuda/nvml.h"
#include "kiln/tester/gpu_monitor.h"
#include "rig.h"

using kiln::gpu_test::reduce_candidate;
using kiln::gpu_test::Rig;
using kiln::gpu_test::summary;
using kiln::gpu_test::task_files;

TEST_CASE("every bundled CUDA task's program 0 is correct and timed in its own runner", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig rig;
  for (const char* task : {"cuda_rmsnorm", "cuda_softmax", "cuda_sgemm", "cuda_reduce_sum", "cuda_transpose"}) {
    auto r = rig.evaluate(task);
    INFO(task << ": " << summary(r));
    CHECK(r.status == kiln::proto::TestStatus::kOk);
    CHECK(r.performance.measured);
    CHECK(r.performance.method == "cuda_events_checked");
    CHECK(r.performance.mode == "cold");
    CHECK(r.worker.backend == kiln::proto::Backend::kCuda);
    CHECK(r.worker.device_name.find("NVIDIA") != std::string::npos);
    CHECK(r.worker.gpu_uuid.rfind("GPU-", 0) == 0);
    CHECK(!r.worker.driver_version.empty());
    CHECK(!r.worker.runtime_version.empty());
    if (!r.performance.cases.empty()) {
      const auto& c = r.performance.cases[0];
      const size_t at = r.log.find("call overhead");
      WARN(task << ": candidate " << c.candidate.median_us << " us, reference " << c.reference.median_us
                << " us, speedup " << c.speedup << " [" << c.speedup_lo << ", " << c.speedup_hi << "]; "
                << (at == std::string::npos ? std::string() : r.log.substr(at, r.log.find('\n', at) - at)));
      CHECK(c.candidate.n >= 10);
      if (std::string(task) == "cuda_sgemm") {
        // cuBLAS always; torch_eager too where the tester has a Python with torch (KILN_TEST_PYTHON).
        const bool torch = r.metadata.count("torch") > 0;
        REQUIRE(c.baselines.size() == (torch ? 2u : 1u));
        CHECK(c.baselines[0].name == "cublas_sgemm");
        if (torch) CHECK(c.baselines[1].name == "torch_eager");
        for (const auto& b : c.baselines) CHECK(b.stats.median_us > 0);
      }
    }
  }
}

TEST_CASE("slots that profile at once take turns with Nsight Compute, and every one gets its profile", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  constexpr int kSlots = 4;
  Rig rig(120, 0.2, {}, {}, "ncu", kiln::tester::TesterOptions{}.ncu, {}, true, kSlots);
  std::vector<kiln::proto::TestRequest> jobs;
  for (int i = 0; i < kSlots; ++i) jobs.push_back(rig.build(i % 2 ? "cuda_softmax" : "cuda_rmsnorm"));
  std::vector<kiln::Result<kiln::proto::TestReport>> got(kSlots, kiln::unavailable("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kSlots; ++i) threads.emplace_back([&, i] { got[i] = rig.tester->evaluate(jobs[i]); });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kSlots; ++i) {
    INFO("slot job " << i << ": " << got[i].status().message());
    REQUIRE(got[i].is_ok());
    INFO(summary(*got[i]));
    CHECK(got[i]->status == kiln::proto::TestStatus::kOk);
    std::printf("  concurrent job %d: %s\n", i, got[i]->profile_summary.c_str());
    CHECK(got[i]->profile_summary.rfind("profile on ", 0) == 0);
  }
}

TEST_CASE("a correct candidate carries Nsight Compute's profile, taken after the verdict", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig rig(120, 0.2, {}, {}, "ncu");
  for (const char* task : {"cuda_softmax", "cuda_sgemm"}) {
    auto r = rig.evaluate(task);
    INFO(task << ": " << summary(r));
    REQUIRE(r.status == kiln::proto::TestStatus::kOk);
    WARN(task << ": " << r.profile_summary);
    REQUIRE(r.profile_summary.rfind("profile on ", 0) == 0);
    CHECK(r.log.find(r.profile_summary) != std::string::npos);
    CHECK(r.profile.at("kernels") >= 1);
    CHECK(r.profile.at("duration_us") > 0);
    for (const char* pct : {"dram_pct", "sm_pct", "occupancy_pct"}) {
      CHECK(r.profile.at(pct) >= 0);
      CHECK(r.profile.at(pct) <= 100);
    }
    CHECK(r.profile.at("registers_per_thread") > 0);
    CHECK(r.profile.at("profile_s") > 0);
    WARN(task << ": profiling took " << r.profile.at("profile_s") << " s, the evaluation " << r.duration_s << " s");
  }
  // A candidate that fails gets no profile run.
  auto bad = rig.evaluate("cuda_softmax", R"(#include "kiln/kernel_abi.h"
extern "C" KILN_EXPORT int kiln_entry(const kiln_args*) { return 3; }
)");
  CHECK(bad.status != kiln::proto::TestStatus::kOk);
  CHECK(bad.profile.empty());
  CHECK(bad.profile_summary.empty());
  // Without ncu the verdict stands and the log says why there is no profile.
  Rig without(120, 0.2, {}, {}, "ncu", "/nonexistent/ncu");
  auto plain = without.evaluate("cuda_softmax");
  REQUIRE(plain.status == kiln::proto::TestStatus::kOk);
  CHECK(plain.profile.empty());
  CHECK(plain.profile_summary == "profiling skipped: no ncu at /nonexistent/ncu");
  CHECK(plain.log.find("profiling skipped: no ncu at /nonexistent/ncu") != std::string::npos);
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
  CHECK(r.status == kiln::proto::TestStatus::kCrashed);
  CHECK(r.message.find("after the candidate's kiln_entry") != std::string::npos);
  CHECK((r.message.find("cudaErrorIllegalAddress") != std::string::npos ||
         r.message.find("cudaErrorLaunchFailure") != std::string::npos));
  auto again = rig.evaluate("cuda_reduce_sum");
  INFO(summary(again));
  CHECK(again.status == kiln::proto::TestStatus::kOk);
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
  CHECK(r.status == kiln::proto::TestStatus::kTimedOut);
  auto again = rig.evaluate("cuda_reduce_sum");
  INFO(summary(again));
  CHECK(again.status == kiln::proto::TestStatus::kOk);
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
  REQUIRE(r.status == kiln::proto::TestStatus::kOk);  // the work is done and right: only its time is hidden
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
  CHECK(r.status != kiln::proto::TestStatus::kOk);
  CHECK(r.status == kiln::proto::TestStatus::kNonFinite);
}

TEST_CASE("A/A: the reference timed as the candidate has a speedup interval containing 1.0", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig rig(120, /*min_time_s=*/0.5);
  auto files = task_files("cuda_transpose");
  auto r = rig.evaluate("cuda_transpose", files.at("reference.cu").data);
  INFO(summary(r));
  REQUIRE(r.status == kiln::proto::TestStatus::kOk);
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

TEST_CASE("the CUDA child forks its runners under the tester's confinement", "[gpu]") {
  // Process creation is refused inside the runners, not to the child, which forks them; the confinement
  // (a read-only root with a private /tmp and /dev/shm, the sandbox's uid) is the tester's default
  // (confine_test.cc checks what it refuses).
  KILN_REQUIRE_GPU_TESTS();
  Rig rig(120, 0.05);
  auto r = rig.evaluate("cuda_transpose");
  INFO(summary(r));
  CHECK(r.status == kiln::proto::TestStatus::kOk);
  CHECK(r.metadata.at("isolation_filesystem") == "readonly_root");
}

TEST_CASE("CUDA testers sharing a claim folder take distinct GPUs, and with every GPU taken one refuses to serve",
          "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  auto nvml = kiln::cuda::Nvml::load();
  REQUIRE(nvml.is_ok());
  auto gpus = kiln::cuda::visible_gpus(**nvml, std::getenv("CUDA_VISIBLE_DEVICES"));
  REQUIRE(gpus.is_ok());
  REQUIRE(!gpus->empty());
  kiln::TempDir claims("kiln-gpu-claims");
  kiln::tester::TesterOptions t;
  t.backend = kiln::proto::Backend::kCuda;
  t.eval_binary = KILN_BINARY_DIR "/bin/kiln-eval-cuda";
  t.profile = "off";
  t.gpu_claim_dir = claims.path();
  std::vector<std::unique_ptr<kiln::tester::TestHandler>> testers;
  std::set<std::string> served;
  for (size_t i = 0; i < gpus->size(); ++i) {
    auto th = kiln::tester::TestHandler::create(t);
    INFO(th.status().message());
    REQUIRE(th.is_ok());
    served.insert((*th)->capabilities().gpu_uuid);
    testers.push_back(std::move(th).value());
  }
  CHECK(served.size() == gpus->size());  // one tester per GPU, none shared
  auto extra = kiln::tester::TestHandler::create(t);
  REQUIRE_FALSE(extra.is_ok());
  CHECK(extra.status().message().find("is claimed by another tester") != std::string::npos);
  // A tester that goes away frees its GPU for the next one.
  std::string freed = testers.back()->capabilities().gpu_uuid;
  testers.pop_back();
  auto next = kiln::tester::TestHandler::create(t);
  REQUIRE(next.is_ok());
  CHECK((*next)->capabilities().gpu_uuid == freed);
}
