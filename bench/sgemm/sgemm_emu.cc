// Runs the cuda_sgemm kernel on the CPU: one std::thread per CUDA thread, one block at a time, __syncthreads
// as a barrier, the kernel's non-sm_80 copy path (synchronous copies), shared memory from the heap. Built with
// AddressSanitizer (or ThreadSanitizer) by emu.sh, it finds out-of-bounds reads and writes of A, B, C and
// shared memory, elements left unwritten (C is NaN-poisoned) and wrong edges, without a GPU.
//
// emu.sh makes the kernel host C++ first: `kernel<<<grid, threads, smem, stream>>>(args)` becomes
// kiln_emu_launch(kernel, grid, threads, smem, stream, args) and `extern __shared__ T name[];` a pointer
// to this block's shared memory. Usage: sgemm_emu M N K [M N K ...]; exit status 0 when every case matches.
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

struct alignas(16) float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

using cudaStream_t = void*;
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <class F>
cudaError_t cudaFuncSetAttribute(F*, cudaFuncAttribute, int bytes) {
  return bytes <= 227 * 1024 ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t g_last_error = cudaSuccess;
inline cudaError_t cudaGetLastError() {
  const cudaError_t e = g_last_error;
  g_last_error = cudaSuccess;
  return e;
}

std::barrier<>* g_barrier = nullptr;
inline void __syncthreads() { g_barrier->arrive_and_wait(); }
thread_local float4* kiln_emu_smem = nullptr;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__

// The launch: blocks one after another, each with its threads at once (a barrier needs them all).
template <class F, class... Args>
void kiln_emu_launch(F* kernel, dim3 grid, int threads, int smem_bytes, cudaStream_t, Args... args) {
  if (threads < 1 || threads > 1024 || smem_bytes > 227 * 1024 || grid.y > 65535) {
    g_last_error = cudaErrorInvalidValue;
    return;
  }
  gridDim = grid;
  blockDim = dim3(static_cast<unsigned>(threads));
  for (unsigned by = 0; by < grid.y; ++by) {
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      // Exactly the bytes asked for (AddressSanitizer sees any access beyond), NaN where nothing was copied.
      std::vector<float4> smem((static_cast<size_t>(smem_bytes) + 15) / 16, float4{NAN, NAN, NAN, NAN});
      std::barrier<> barrier(threads);
      g_barrier = &barrier;
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
          threadIdx = dim3(static_cast<unsigned>(t));
          blockIdx = dim3(bx, by);
          kiln_emu_smem = smem.data();
          kernel(args...);
        });
      }
      for (auto& th : pool) th.join();
    }
  }
}

#include "kernel_host.inc"

namespace {

uint64_t g_state = 0x9E3779B97F4A7C15ull;
float uniform() {
  g_state = g_state * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<float>((g_state >> 40) + 1) / 16777217.0f;
}
float normal() { return std::sqrt(-2.f * std::log(uniform())) * std::cos(6.2831853f * uniform()); }

// One case: the kernel through kiln_entry against a double-precision product; C starts as NaN.
bool run_case(int m, int n, int k) {
  std::vector<float> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(k) * n);
  std::vector<float> c(static_cast<size_t>(m) * n, NAN);
  for (auto& v : a) v = normal();
  for (auto& v : b) v = normal();
  kiln_tensor in[2] = {{a.data(), KILN_F32, 2, {m, k}}, {b.data(), KILN_F32, 2, {k, n}}};
  kiln_tensor out[1] = {{c.data(), KILN_F32, 2, {m, n}}};
  kiln_args args{in, 2, out, 1, nullptr, nullptr, 0, nullptr};
  const int rc = kiln_entry(&args);
  double worst = 0;
  long bad = 0;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double ref = 0;
      for (int p = 0; p < k; ++p)
        ref += static_cast<double>(a[static_cast<size_t>(i) * k + p]) * b[static_cast<size_t>(p) * n + j];
      const double got = c[static_cast<size_t>(i) * n + j];
      const double err = std::fabs(got - ref);
      if (!(err <= 1e-3 + 1e-3 * std::fabs(ref))) ++bad;  // NaN counts as bad
      if (err > worst || std::isnan(err)) worst = std::isnan(err) ? INFINITY : err;
    }
  }
  std::printf("  %dx%dx%d: rc %d, %ld bad, max abs err %.3g\n", m, n, k, rc, bad, worst);
  return rc == 0 && bad == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || (argc - 1) % 3 != 0) {
    std::fprintf(stderr, "usage: %s M N K [M N K ...]\n", argv[0]);
    return 2;
  }
  bool ok = true;
  for (int i = 1; i + 2 < argc; i += 3)
    ok = run_case(std::atoi(argv[i]), std::atoi(argv[i + 1]), std::atoi(argv[i + 2])) && ok;
  return ok ? 0 : 1;
}
