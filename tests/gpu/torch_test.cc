// A PyTorch module as the reference on the GPU (configs/kernelbench/*_cuda): the reference.py runs in a
// Python runner of its own on the evaluator's device arenas, the candidate stays a C-ABI kernel, and the
// call-overhead probe runs in a C runner beside them. Each test skips unless KILN_GPU_TESTS=1, and where the
// tester finds no Python with torch (KILN_TEST_PYTHON names one).
#include <catch2/catch.hpp>
#include <string>

#include "rig.h"

using kiln::gpu_test::Rig;
using kiln::gpu_test::summary;

namespace {

// A softmax over rows that is wrong in one way: `bug` 0 is correct, 1 skips the max subtraction's guard for
// the last row (every other row right), 2 writes exp() without dividing.
std::string softmax_candidate(int bug) {
  return R"(#include "kiln/kernel_abi.h"
#define BUG )" +
         std::to_string(bug) +
         R"(
__global__ void sm(const float* x, float* y, long long rows, long long cols) {
  long long r = blockIdx.x;
  if (r >= rows || threadIdx.x != 0) return;
  const float* in = x + r * cols;
  float* out = y + r * cols;
  float m = in[0], s = 0;
  for (long long c = 1; c < cols; ++c) m = fmaxf(m, in[c]);
  for (long long c = 0; c < cols; ++c) s += expf(in[c] - m);
  for (long long c = 0; c < cols; ++c) {
    float v = expf(in[c] - m);
    if (BUG == 2) out[c] = v;
    else if (BUG == 1 && r == rows - 1) out[c] = v / (s + 1.0f);
    else out[c] = v / s;
  }
}
extern "C" KILN_EXPORT int kiln_entry(const kiln_args* a) {
  long long rows = a->inputs[0].shape[0], cols = a->inputs[0].shape[1];
  sm<<<(unsigned)rows, 32, 0, (cudaStream_t)a->stream>>>((const float*)a->inputs[0].data,
                                                         (float*)a->outputs[0].data, rows, cols);
  return 0;
}
)";
}

// softmax_candidate(0) that, at load time, makes the CUDA event timer of its own process report 1 ns: its
// runner's events then claim what the evaluator's clock denies.
std::string lying_softmax() {
  std::string code = softmax_candidate(0);
  code += R"(
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cstdint>
#include <cstring>
extern "C" cudaError_t tiny_elapsed(float* ms, cudaEvent_t, cudaEvent_t) { *ms = 1e-6f; return cudaSuccess; }
__attribute__((constructor)) static void patch() {
  void* target = dlsym(RTLD_DEFAULT, "cudaEventElapsedTime");
  if (!target) return;
  const long page = sysconf(_SC_PAGESIZE);
  auto* start = (unsigned char*)((uintptr_t)target & ~(uintptr_t)(page - 1));
  if (mprotect(start, 2 * page, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) return;
  auto* t = (unsigned char*)target;
  const uint64_t d = (uint64_t)(void*)&tiny_elapsed;
  t[0] = 0x48; t[1] = 0xB8; std::memcpy(t + 2, &d, 8); t[10] = 0xFF; t[11] = 0xE0;
  mprotect(start, 2 * page, PROT_READ | PROT_EXEC);
}
)";
  return code;
}

bool has_torch(const kiln::proto::TestReport& r) {
  auto it = r.metadata.find("torch");
  return it != r.metadata.end() && !it->second.empty();
}

}  // namespace

TEST_CASE("a PyTorch reference on the GPU: program 0 is checked and timed against the module", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig rig;
  auto r = rig.try_evaluate("kernelbench/kb_softmax_cuda");
  if (!r.is_ok() && r.status().message().find("no Python with torch") != std::string::npos) {
    kiln::testing::skip_test("no Python with torch here (KILN_TEST_PYTHON names one)");
  }
  INFO(r.status().message());
  REQUIRE(r.is_ok());
  INFO(summary(*r));
  CHECK(r->status == kiln::proto::TestStatus::kOk);
  CHECK(has_torch(*r));
  CHECK(r->metadata.at("reference") == "torch_eager");
  REQUIRE(r->performance.measured);
  REQUIRE(!r->performance.cases.empty());
  for (const auto& c : r->performance.cases) {
    CHECK(c.candidate.median_us > 0);
    CHECK(c.reference.median_us > 0);
    CHECK(c.speedup_lo <= c.speedup);
    CHECK(c.speedup <= c.speedup_hi);
  }
}

TEST_CASE("a PyTorch reference on the GPU: wrong kernels fail, a correct one passes", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig rig;
  auto ok = rig.try_evaluate("kernelbench/kb_softmax_cuda", softmax_candidate(0));
  if (!ok.is_ok() && ok.status().message().find("no Python with torch") != std::string::npos) {
    kiln::testing::skip_test("no Python with torch here (KILN_TEST_PYTHON names one)");
  }
  REQUIRE(ok.is_ok());
  INFO(summary(*ok));
  CHECK(ok->status == kiln::proto::TestStatus::kOk);
  for (int bug : {1, 2}) {
    auto r = rig.evaluate("kernelbench/kb_softmax_cuda", softmax_candidate(bug));
    INFO("bug " << bug << ": " << summary(r));
    CHECK(r.status == kiln::proto::TestStatus::kMismatch);
  }
}

TEST_CASE("a PyTorch reference on the GPU: a candidate's forged event times are disbelieved", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig rig(240, /*min_time_s=*/0.3);
  auto r = rig.try_evaluate("kernelbench/kb_softmax_cuda", lying_softmax());
  if (!r.is_ok() && r.status().message().find("no Python with torch") != std::string::npos) {
    kiln::testing::skip_test("no Python with torch here (KILN_TEST_PYTHON names one)");
  }
  REQUIRE(r.is_ok());
  INFO(summary(*r));
  // One thread per row is far slower than PyTorch: on the evaluator's clock it stays so. A Python runner's
  // clock gap (the interpreter's steps) would have hidden the lie; the C probe's does not.
  REQUIRE(r->status == kiln::proto::TestStatus::kOk);
  CHECK(r->performance.method == "host_clock");
  REQUIRE(r->performance.cases.size() == 1);
  const auto& c = r->performance.cases[0];
  WARN("forged events beside PyTorch: " << c.speedup << " [" << c.speedup_lo << ", " << c.speedup_hi << "]");
  CHECK(c.speedup_hi < 1.0);
}
