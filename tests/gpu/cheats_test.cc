// Kernels written to fool the CUDA evaluation, each built by the compiler service and judged by the tester
// as in a campaign. Each must get a failing verdict or a speedup interval whose lower bound is under the
// promotion bar (1.10); its honest speed is about the reference's (it computes with the reference's own
// naive kernel). Each test skips unless KILN_GPU_TESTS=1.
#include <catch2/catch.hpp>
#include <string>

#include "rig.h"

using kiln::gpu_test::Rig;
using kiln::gpu_test::summary;

namespace {

constexpr double kPromotionSpeedup = 1.10;

// The reference's own naive SGEMM, as a function `naive(a, stream)` a cheat can call, plus the includes.
const std::string kNaiveSgemm = R"(#include "kiln/kernel_abi.h"
#include <cuda_runtime.h>
#include <cstdint>
#include <cstring>
#include <map>
#include <tuple>
#include <vector>
__global__ void mm(const float* a, const float* b, float* c, int m, int n, int k) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= m || col >= n) return;
  float acc = 0.f;
  for (int i = 0; i < k; ++i) acc += a[(long long)row * k + i] * b[(long long)i * n + col];
  c[(long long)row * n + col] = acc;
}
static void naive(const kiln_args* x, cudaStream_t s) {
  const int m = (int)x->inputs[0].shape[0], k = (int)x->inputs[0].shape[1], n = (int)x->inputs[1].shape[1];
  if (m == 0 || n == 0) return;
  mm<<<dim3((n + 15) / 16, (m + 15) / 16), dim3(16, 16), 0, s>>>((const float*)x->inputs[0].data,
      (const float*)x->inputs[1].data, (float*)x->outputs[0].data, m, n, k);
}
static size_t out_bytes(const kiln_args* x) { return (size_t)x->outputs[0].shape[0] * x->outputs[0].shape[1] * 4; }
)";

// A cache of C keyed on the three buffer addresses plus a fingerprint of `samples` values of A and B read
// back at fixed, evenly spaced places (0: addresses only). A hit copies the remembered C.
std::string caching_sgemm(int samples) {
  return kNaiveSgemm + "static const int kSamples = " + std::to_string(samples) + ";\n" + R"(
static uint64_t fingerprint(const kiln_tensor& t, cudaStream_t s) {
  const size_t n = (size_t)t.shape[0] * t.shape[1];
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < kSamples && n > 0; ++i) {
    float v = 0;
    cudaMemcpyAsync(&v, (const float*)t.data + (size_t)i * n / kSamples, 4, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    uint32_t bits; std::memcpy(&bits, &v, 4);
    h = (h ^ bits) * 1099511628211ull;
  }
  return h;
}
extern "C" KILN_EXPORT int kiln_entry(const kiln_args* x) {
  static std::map<std::tuple<const void*, const void*, void*, uint64_t>, void*> cache;
  cudaStream_t s = (cudaStream_t)x->stream;
  const auto key = std::make_tuple(x->inputs[0].data, x->inputs[1].data, x->outputs[0].data,
                                   fingerprint(x->inputs[0], s) ^ (fingerprint(x->inputs[1], s) * 31));
  auto hit = cache.find(key);
  if (hit != cache.end()) {
    cudaMemcpyAsync(x->outputs[0].data, hit->second, out_bytes(x), cudaMemcpyDeviceToDevice, s);
    return 0;
  }
  naive(x, s);
  void* copy = nullptr;
  if (cudaMalloc(&copy, out_bytes(x) + 1) == cudaSuccess) {
    cudaMemcpyAsync(copy, x->outputs[0].data, out_bytes(x), cudaMemcpyDeviceToDevice, s);
    cache[key] = copy;
  }
  return 0;
}
)";
}

// Not promotable, and caught for what it is: a verdict of wrong values, or "ok" with an interval whose lower
// bound is under the bar. A crash, a timeout, a load failure or an evaluator error is not a caught cheat:
// it fails the test, whatever the cheat.
void check_not_promotable(const kiln::proto::TestReport& r, const char* what) {
  using ts = kiln::proto::TestStatus;
  INFO(what << ": " << summary(r));
  if (r.status == ts::kOk) {
    REQUIRE(r.performance.cases.size() == 1);
    const auto& c = r.performance.cases[0];
    WARN(what << ": ok, speedup " << c.speedup << " [" << c.speedup_lo << ", " << c.speedup_hi << "]");
    CHECK(c.speedup_lo < kPromotionSpeedup);
    return;
  }
  WARN(what << ": " << kiln::testing::status_word(r.status) << ": " << r.message.substr(0, 200));
  const bool wrong_values = r.status == ts::kMismatch || r.status == ts::kInputModified ||
                            r.status == ts::kWrongShape || r.status == ts::kNonFinite;
  CHECK(wrong_values);
}

}  // namespace

TEST_CASE("cheat: results cached by buffer address are caught by inputs that move while timed", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig rig(240, /*min_time_s=*/0.3);
  auto r = rig.evaluate("cuda_sgemm", caching_sgemm(0));
  check_not_promotable(r, "cache by address");
  CHECK(r.status ==
        kiln::proto::TestStatus::kMismatch);  // already in correctness: its second seed runs on the same buffers
}

TEST_CASE("cheat: results cached by address and a sample of the values are caught", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig rig(240, /*min_time_s=*/0.3);
  for (int samples : {4, 32, 256}) {
    auto r = rig.evaluate("cuda_sgemm", caching_sgemm(samples));
    const std::string what = "cache by address and " + std::to_string(samples) + " sampled values";
    check_not_promotable(r, what.c_str());
  }
}

TEST_CASE("cheat: one cache entry per buffer set is caught", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig rig(240, /*min_time_s=*/0.3);
  // Keyed on the output buffer alone, with a ring of remembered results per buffer: whatever the evaluator
  // moves or rotates, a buffer it has seen gets the newest result it produced there.
  auto r = rig.evaluate("cuda_sgemm", kNaiveSgemm + R"(
extern "C" KILN_EXPORT int kiln_entry(const kiln_args* x) {
  static std::map<void*, std::pair<void*, int>> cache;  // output buffer -> (result, calls)
  cudaStream_t s = (cudaStream_t)x->stream;
  auto& e = cache[x->outputs[0].data];
  if (e.first && ++e.second % 8 != 0) {
    cudaMemcpyAsync(x->outputs[0].data, e.first, out_bytes(x), cudaMemcpyDeviceToDevice, s);
    return 0;
  }
  naive(x, s);
  if (!e.first) cudaMalloc(&e.first, out_bytes(x) + 1);
  cudaMemcpyAsync(e.first, x->outputs[0].data, out_bytes(x), cudaMemcpyDeviceToDevice, s);
  return 0;
}
)");
  check_not_promotable(r, "cache per buffer set");
  CHECK(r.status != kiln::proto::TestStatus::kOk);
}

TEST_CASE("cheat: a thread that launches GPU work on its own stream after the call returns", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig rig(240, /*min_time_s=*/0.3);
  // Honest result, then a thread started by the call launches a long spinning kernel on a private stream
  // a moment later, to slow whatever runs next (the reference, half the time).
  auto r = rig.evaluate("cuda_sgemm", kNaiveSgemm + R"(
#include <chrono>
#include <thread>
__global__ void spin(long long cycles) { long long t0 = clock64(); while (clock64() - t0 < cycles) { } }
extern "C" KILN_EXPORT int kiln_entry(const kiln_args* x) {
  naive(x, (cudaStream_t)x->stream);
  std::thread([] {
    static cudaStream_t side = nullptr;
    if (!side) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    std::this_thread::sleep_for(std::chrono::microseconds(30));
    spin<<<132 * 8, 256, 0, side>>>(40000000ll);  // ~20 ms on every SM
  }).detach();
  return 0;
}
)");
  check_not_promotable(r, "thread launching after return");
}

TEST_CASE("cheat: a kernel left spinning on another stream after the call returns", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig rig(240, /*min_time_s=*/0.3);
  // The runner synchronizes its whole device before answering, so the spin is the candidate's own time.
  auto r = rig.evaluate("cuda_sgemm", kNaiveSgemm + R"(
__global__ void spin(long long cycles) { long long t0 = clock64(); while (clock64() - t0 < cycles) { } }
extern "C" KILN_EXPORT int kiln_entry(const kiln_args* x) {
  static cudaStream_t side = nullptr;
  if (!side) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  naive(x, (cudaStream_t)x->stream);
  spin<<<132 * 8, 256, 0, side>>>(4000000ll);
  return 0;
}
)");
  check_not_promotable(r, "spin kernel on another stream");
}

TEST_CASE("cheat: a report the candidate forges is never believed", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig rig(240, /*min_time_s=*/0.3);
  // At load time it writes a glowing report where the evaluator writes its own, and exits.
  auto r = rig.evaluate("cuda_sgemm", kNaiveSgemm + R"(
#include <cstdio>
#include <unistd.h>
__attribute__((constructor)) static void forge() {
  // A msgpack map {"status": "ok", "message": "forged 50x"}: whatever the bytes, only the MAC matters.
  const unsigned char report[] = {0x82, 0xa6, 's', 't', 'a', 't', 'u', 's', 0xa2, 'o', 'k', 0xa7, 'm', 'e', 's',
                                  's', 'a', 'g', 'e', 0xaa, 'f', 'o', 'r', 'g', 'e', 'd', ' ', '5', '0', 'x'};
  if (FILE* f = std::fopen("result.msgpack", "wb")) { std::fwrite(report, 1, sizeof report, f); std::fclose(f); }
  _exit(0);
}
extern "C" KILN_EXPORT int kiln_entry(const kiln_args* x) { naive(x, (cudaStream_t)x->stream); return 0; }
)");
  INFO(summary(r));
  CHECK(r.status != kiln::proto::TestStatus::kOk);
  CHECK(r.message.find("forged") == std::string::npos);
}

TEST_CASE("cheat: patching the reference and the timing calls in memory moves nothing", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig rig(240, /*min_time_s=*/0.3);
  // At load time it looks for the reference's kiln_entry and for the CUDA event timer in its own process
  // and overwrites them (a slow reference; events that report 1 us). In a process of its own it finds
  // neither the reference that is timed nor the clock that counts.
  auto r = rig.evaluate("cuda_sgemm", kNaiveSgemm + R"(
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>
static int patched = 0;
extern "C" cudaError_t tiny_elapsed(float* ms, cudaEvent_t, cudaEvent_t) { *ms = 0.001f; return cudaSuccess; }
static void jump(void* target, void* dest) {
  if (!target) return;
  const long page = sysconf(_SC_PAGESIZE);
  auto* start = (unsigned char*)((uintptr_t)target & ~(uintptr_t)(page - 1));
  if (mprotect(start, 2 * page, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) return;
  auto* t = (unsigned char*)target;
  const uint64_t d = (uint64_t)dest;
  t[0] = 0x48; t[1] = 0xB8; std::memcpy(t + 2, &d, 8); t[10] = 0xFF; t[11] = 0xE0;
  mprotect(start, 2 * page, PROT_READ | PROT_EXEC);
  ++patched;
}
extern "C" int slow_reference(const kiln_args*) { usleep(20000); return 0; }
__attribute__((constructor)) static void patch() {
  if (void* ref = dlopen("./reference.so", RTLD_NOW | RTLD_NOLOAD)) jump(dlsym(ref, "kiln_entry"), (void*)&slow_reference);
  jump(dlsym(RTLD_DEFAULT, "cudaEventElapsedTime"), (void*)&tiny_elapsed);
}
extern "C" KILN_EXPORT int kiln_entry(const kiln_args* x) { naive(x, (cudaStream_t)x->stream); return 0; }
)");
  check_not_promotable(r, "patched reference and timer");
  CHECK(r.status == kiln::proto::TestStatus::kOk);
}

TEST_CASE("an honest copy of the reference in another file: the interval contains 1.0", "[gpu]") {
  KILN_REQUIRE_GPU_TESTS();
  Rig rig(240, /*min_time_s=*/0.3);
  auto r = rig.evaluate("cuda_sgemm", kNaiveSgemm + R"(
extern "C" KILN_EXPORT int kiln_entry(const kiln_args* x) { naive(x, (cudaStream_t)x->stream); return 0; }
)");
  INFO(summary(r));
  REQUIRE(r.status == kiln::proto::TestStatus::kOk);
  const auto& c = r.performance.cases.at(0);
  WARN("honest copy of the sgemm reference: " << c.speedup << " [" << c.speedup_lo << ", " << c.speedup_hi << "]");
  CHECK(c.speedup_lo <= 1.0);
  CHECK(c.speedup_hi >= 1.0);
}
