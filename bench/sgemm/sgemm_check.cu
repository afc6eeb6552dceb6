// One cuda_sgemm build (configs/tasks/cuda_sgemm/kernel.cu compiled with its parameters as -D flags, linked in
// as kiln_entry) against cuBLAS fp32 SGEMM (CUBLAS_DEFAULT_MATH: no TF32): correctness on the task's shapes
// and 4096^3, then the time of both on 4096^3 (L2 flushed by writing 256 MB before every call, CUDA events
// around the call alone, the two interleaved, median of --reps after --warmup). Prints one JSON line.
//
// Correct: kiln_entry returns 0, no CUDA error, every element within |C - C_cublas| <= 1e-3 + 1e-3 |C_cublas|
// (the task's rtol and atol; C starts NaN-poisoned), and the 16 KB guards before and after C untouched.
// max_err is max |C - C_cublas| / (1 + |C_cublas|). ratio is cublas_us / kernel_us (>= 0.9 is the goal).
//
// Usage: sgemm_check [--params "BM=128 BN=128 ..."] [--regs N] [--spills N] [--reps 20] [--warmup 3]
//                    [--small-only] [--size 4096]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/kernel_abi.h"

namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "sgemm_check: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(3);
}

void check_blas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "sgemm_check: %s: cuBLAS status %d\n", what, static_cast<int>(s));
  std::exit(3);
}

struct Options {
  std::string params;
  int regs = -1, spills = -1, reps = 20, warmup = 3, size = 4096;
  bool small_only = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--small-only") {
      o.small_only = true;
    } else if (a == "--params" && has_value) {
      o.params = argv[++i];
    } else if (a == "--regs" && has_value) {
      o.regs = std::atoi(argv[++i]);
    } else if (a == "--spills" && has_value) {
      o.spills = std::atoi(argv[++i]);
    } else if (a == "--reps" && has_value) {
      o.reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--warmup" && has_value) {
      o.warmup = std::max(0, std::atoi(argv[++i]));
    } else if (a == "--size" && has_value) {
      o.size = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "sgemm_check: unknown or incomplete argument '%s'\n", a.c_str());
      std::exit(2);
    }
  }
  return o;
}

// "BM=128 BN=64" -> {"BM": 128, "BN": 64} (a value that is not a number is quoted).
std::string params_json(const std::string& text) {
  std::string out = "{";
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string::npos) end = text.size();
    const std::string kv = text.substr(pos, end - pos);
    pos = end + 1;
    const size_t eq = kv.find('=');
    if (kv.empty() || eq == std::string::npos) continue;
    const std::string value = kv.substr(eq + 1);
    const bool number = !value.empty() && value.find_first_not_of("0123456789.-") == std::string::npos;
    out += (out.size() > 1 ? ", \"" : "\"") + kv.substr(0, eq) + "\": " + (number ? value : "\"" + value + "\"");
  }
  return out + "}";
}

uint64_t g_state = 0x2545F4914F6CDD1Dull;
float normal() {
  auto uniform = [] {
    g_state = g_state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((g_state >> 40) + 1) / 16777217.0f;
  };
  const float u = uniform(), v = uniform();
  return std::sqrt(-2.f * std::log(u)) * std::cos(6.2831853f * v);
}

constexpr size_t kGuard = 4096;  // floats (16 KB) on each side of C; C stays 4096-byte aligned
constexpr unsigned char kGuardByte = 0x5A;

struct Case {
  int m, n, k;
  float *a = nullptr, *b = nullptr, *c_base = nullptr, *c = nullptr, *ref = nullptr;
};

Case make_case(int m, int n, int k) {
  Case t{m, n, k};
  std::vector<float> ha(static_cast<size_t>(m) * k), hb(static_cast<size_t>(k) * n);
  for (auto& v : ha) v = normal();
  for (auto& v : hb) v = normal();
  const size_t cn = static_cast<size_t>(m) * n;
  check_cuda(cudaMalloc(&t.a, ha.size() * 4), "cudaMalloc A");
  check_cuda(cudaMalloc(&t.b, hb.size() * 4), "cudaMalloc B");
  check_cuda(cudaMalloc(&t.c_base, (cn + 2 * kGuard) * 4), "cudaMalloc C");
  check_cuda(cudaMalloc(&t.ref, cn * 4), "cudaMalloc C_cublas");
  t.c = t.c_base + kGuard;
  check_cuda(cudaMemcpy(t.a, ha.data(), ha.size() * 4, cudaMemcpyHostToDevice), "copy A");
  check_cuda(cudaMemcpy(t.b, hb.data(), hb.size() * 4, cudaMemcpyHostToDevice), "copy B");
  return t;
}

void free_case(Case& t) {
  cudaFree(t.a);
  cudaFree(t.b);
  cudaFree(t.c_base);
  cudaFree(t.ref);
}

int call_kernel(const Case& t, cudaStream_t stream) {
  kiln_tensor in[2] = {{t.a, KILN_F32, 2, {t.m, t.k}}, {t.b, KILN_F32, 2, {t.k, t.n}}};
  kiln_tensor out[1] = {{t.c, KILN_F32, 2, {t.m, t.n}}};
  const kiln_args args{in, 2, out, 1, nullptr, nullptr, 0, stream};
  return kiln_entry(&args);
}

void call_cublas(cublasHandle_t h, const Case& t, float* c) {
  // Row-major C = A B is column-major C^T = B^T A^T.
  const float one = 1.f, zero = 0.f;
  check_blas(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, t.n, t.m, t.k, &one, t.b, t.n, t.a, t.k, &zero, c, t.n),
             "cublasSgemm");
}

struct Verdict {
  bool correct = true;
  double max_err = 0;
  std::string why;
};

void check_case(const Case& t, cublasHandle_t h, cudaStream_t stream, Verdict& v) {
  const size_t cn = static_cast<size_t>(t.m) * t.n;
  check_cuda(cudaMemset(t.c_base, kGuardByte, (cn + 2 * kGuard) * 4), "guard");
  check_cuda(cudaMemset(t.c, 0xFF, cn * 4), "poison");  // 0xFFFFFFFF is a NaN
  const int rc = call_kernel(t, stream);
  const cudaError_t err = cudaStreamSynchronize(stream);
  call_cublas(h, t, t.ref);
  check_cuda(cudaStreamSynchronize(stream), "cuBLAS");
  const std::string shape = std::to_string(t.m) + "x" + std::to_string(t.n) + "x" + std::to_string(t.k);
  if (rc != 0 || err != cudaSuccess) {
    v.correct = false;
    v.why += shape + ": rc " + std::to_string(rc) + ", " + cudaGetErrorString(err) + "; ";
    if (err != cudaSuccess) {
      std::fprintf(stderr, "sgemm_check: %s: %s (the context is lost)\n", shape.c_str(), cudaGetErrorString(err));
      std::exit(4);
    }
    return;
  }
  std::vector<float> got(cn + 2 * kGuard), ref(cn);
  check_cuda(cudaMemcpy(got.data(), t.c_base, got.size() * 4, cudaMemcpyDeviceToHost), "copy C");
  check_cuda(cudaMemcpy(ref.data(), t.ref, cn * 4, cudaMemcpyDeviceToHost), "copy C_cublas");
  const unsigned char* g = reinterpret_cast<const unsigned char*>(got.data());
  for (size_t i = 0; i < kGuard * 4; ++i) {
    if (g[i] != kGuardByte || g[(kGuard + cn) * 4 + i] != kGuardByte) {
      v.correct = false;
      v.why += shape + ": wrote outside C; ";
      break;
    }
  }
  long bad = 0;
  for (size_t i = 0; i < cn; ++i) {
    const double c = got[kGuard + i], r = ref[i], e = std::fabs(c - r);
    if (!(e <= 1e-3 + 1e-3 * std::fabs(r))) ++bad;                        // NaN is bad
    const double rel = std::isfinite(e) ? e / (1 + std::fabs(r)) : 1e30;  // JSON has no inf
    v.max_err = std::max(v.max_err, rel);
  }
  if (bad > 0) {
    v.correct = false;
    v.why += shape + ": " + std::to_string(bad) + " elements off; ";
  }
}

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median microseconds of the kernel and of cuBLAS, interleaved, each after a 256 MB write that flushes L2.
void time_both(const Case& t, cublasHandle_t h, cudaStream_t stream, const Options& o, double& kernel_us,
               double& cublas_us) {
  constexpr size_t kFlush = size_t{256} << 20;
  void* flush = nullptr;
  check_cuda(cudaMalloc(&flush, kFlush), "cudaMalloc flush");
  cudaEvent_t start, stop;
  check_cuda(cudaEventCreate(&start), "event");
  check_cuda(cudaEventCreate(&stop), "event");
  std::vector<float> ks, cs;
  for (int i = 0; i < o.warmup + o.reps; ++i) {
    for (int which = 0; which < 2; ++which) {
      check_cuda(cudaMemsetAsync(flush, i & 0xFF, kFlush, stream), "flush");
      check_cuda(cudaEventRecord(start, stream), "record");
      if (which == 0) {
        if (call_kernel(t, stream) != 0) check_cuda(cudaErrorLaunchFailure, "kiln_entry in the timing loop");
      } else {
        call_cublas(h, t, t.ref);
      }
      check_cuda(cudaEventRecord(stop, stream), "record");
      check_cuda(cudaEventSynchronize(stop), "timed call");
      float ms = 0;
      check_cuda(cudaEventElapsedTime(&ms, start, stop), "elapsed");
      if (i >= o.warmup) (which == 0 ? ks : cs).push_back(ms * 1000.f);
    }
  }
  kernel_us = median(ks);
  cublas_us = median(cs);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(flush);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  cudaStream_t stream;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  cublasHandle_t h;
  check_blas(cublasCreate(&h), "cublasCreate");
  check_blas(cublasSetStream(h, stream), "cublasSetStream");
  check_blas(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");  // fp32 FMA, no TF32

  // The task's correctness cases (configs/tasks/cuda_sgemm/task.yaml), float4-path edges, then the benchmark.
  std::vector<std::array<int, 3>> shapes = {{1, 1, 1},        {17, 33, 65},   {128, 128, 128}, {100, 257, 129},
                                            {513, 300, 1000}, {260, 132, 27}, {3, 516, 8},     {1, 4, 17}};
  Verdict v;
  for (const auto& s : shapes) {
    Case t = make_case(s[0], s[1], s[2]);
    check_case(t, h, stream, v);
    free_case(t);
  }
  double kernel_us = 0, cublas_us = 0;
  if (!o.small_only) {  // the benchmark shape: checked, then timed
    Case t = make_case(o.size, o.size, o.size);
    check_case(t, h, stream, v);
    time_both(t, h, stream, o, kernel_us, cublas_us);
    free_case(t);
  }
  const double flop = 2.0 * o.size * o.size * o.size;
  std::printf(
      "{\"params\": %s, \"correct\": %s, \"max_err\": %.3g, \"kernel_us\": %.1f, \"cublas_us\": %.1f, "
      "\"ratio\": %.3f, \"kernel_tflops\": %.2f, \"cublas_tflops\": %.2f, \"regs\": %d, \"spills\": %d, "
      "\"size\": %d, \"reps\": %d%s%s%s}\n",
      params_json(o.params).c_str(), v.correct ? "true" : "false", v.max_err, kernel_us, cublas_us,
      kernel_us > 0 ? cublas_us / kernel_us : 0.0, kernel_us > 0 ? flop / kernel_us / 1e6 : 0.0,
      cublas_us > 0 ? flop / cublas_us / 1e6 : 0.0, o.regs, o.spills, o.size, o.reps,
      v.why.empty() ? "" : ", \"why\": \"", v.why.c_str(), v.why.empty() ? "" : "\"");
  cublasDestroy(h);
  cudaStreamDestroy(stream);
  return v.correct ? 0 : 1;
}
