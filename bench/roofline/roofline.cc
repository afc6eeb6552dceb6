// kiln-bench-roofline: numbers for the CUDA backend on the GPU it runs on (JSON on stdout or --out).
//  - copy: device-to-device copy bandwidth (bytes read + written), the ceiling of memory-bound kernels;
//  - every parameter combination of each memory-bound bundled task, built with nvcc through the compiler
//    handler, checked against the reference and timed with CUDA events (L2 flushed before each call):
//    the best one's bandwidth as a fraction of the copy bandwidth;
//  - sgemm: every combination against cuBLAS on the benchmark case;
//  - the compiler farm: distinct builds per second with 1, 4 and 8 concurrent builders, and a cache hit;
//  - the tester: wall time of one evaluation of a tiny CUDA task with timing cut to the minimum (spawn,
//    CUDA context, load, inputs, correctness).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "kiln/compiler/handler.h"
#include "kiln/core/files.h"
#include "kiln/cuda/eval.h"
#include "kiln/cuda/runtime.h"
#include "kiln/eval/tensor.h"
#include "kiln/eval/eval.h"
#include "kiln/task/task.h"
#include "kiln/tester/handler.h"

namespace {

using json = nlohmann::json;
using kiln::eval::HostTensor;
using Clock = std::chrono::steady_clock;

constexpr int kWarmup = 3;
constexpr int kIters = 15;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "kiln-bench-roofline: %s\n", what.c_str());
  std::exit(1);
}

void check(const kiln::Status& s, const std::string& what) {
  if (!s.is_ok()) die(what + ": " + s.message());
}

#define CUDA_OR_DIE(call)                                                                  \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) die(kiln::cuda::describe_error(e_, #call, __FILE__, __LINE__)); \
  } while (0)

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Times `call` with events on `stream`: warm-up, then kIters samples, each after an L2 flush. Median in us.
double time_us(cudaStream_t stream, kiln::cuda::DeviceBuffer& flush, const std::function<void()>& call) {
  auto start = kiln::cuda::Event::create();
  auto stop = kiln::cuda::Event::create();
  if (!start.is_ok() || !stop.is_ok()) die("cudaEventCreate failed");
  for (int i = 0; i < kWarmup; ++i) call();
  CUDA_OR_DIE(cudaDeviceSynchronize());
  std::vector<double> samples;
  for (int i = 0; i < kIters; ++i) {
    CUDA_OR_DIE(cudaMemsetAsync(flush.data(), i & 0xff, flush.bytes(), stream));
    CUDA_OR_DIE(cudaEventRecord(start->get(), stream));
    call();
    CUDA_OR_DIE(cudaEventRecord(stop->get(), stream));
    CUDA_OR_DIE(cudaEventSynchronize(stop->get()));
    float ms = 0;
    CUDA_OR_DIE(cudaEventElapsedTime(&ms, start->get(), stop->get()));
    samples.push_back(ms * 1e3);
  }
  CUDA_OR_DIE(cudaDeviceSynchronize());
  return median(samples);
}

// Every combination of a task's parameters.
std::vector<std::map<std::string, std::string>> combinations(const kiln::task::TaskSpec& spec) {
  std::vector<std::map<std::string, std::string>> out{{}};
  for (const auto& [name, values] : spec.params) {
    std::vector<std::map<std::string, std::string>> next;
    for (const auto& partial : out) {
      for (const auto& v : values) {
        auto c = partial;
        c[name] = v;
        next.push_back(std::move(c));
      }
    }
    out = std::move(next);
  }
  return out;
}

std::string params_text(const std::map<std::string, std::string>& p) {
  std::string s;
  for (const auto& [k, v] : p) s += (s.empty() ? "" : " ") + k + "=" + v;
  return s;
}

struct Built {
  std::map<std::string, std::string> params;
  std::string kernel_so, reference_so;
  int64_t registers = -1;
  bool ok = false;
  std::string error;
};

kiln::proto::CompileRequest request_for(const kiln::proto::FileMap& files, const std::string& id,
                                        const std::map<std::string, std::string>& params) {
  kiln::proto::CompileRequest req;
  req.cand.campaign_id = "roofline";
  req.cand.program_id = id;
  req.cand.code = files.at("kernel.cu").data;
  req.cand.params = params;
  req.backend = kiln::proto::Backend::kCuda;
  req.arch = "sm_90";
  req.files = files;
  return req;
}

Built build_one(kiln::compiler::CompileHandler& compiler, const kiln::proto::FileMap& files, const std::string& id,
                const std::map<std::string, std::string>& params) {
  Built b;
  b.params = params;
  auto out = compiler.compile(request_for(files, id, params));
  if (out.next.size() != 1 || out.next[0].service != "test.cuda") {
    auto r = out.next.empty() ? kiln::Result<kiln::proto::ScoreResult>(kiln::internal_error("no follow-up"))
                              : kiln::proto::decode<kiln::proto::ScoreResult>(out.next[0].payload.data);
    b.error = r.is_ok() ? r->error.substr(0, 300) : "unreadable result";
    return b;
  }
  auto test = kiln::proto::decode<kiln::proto::TestRequest>(out.next[0].payload.data);
  if (!test.is_ok()) return b;
  auto so = kiln::proto::kernel_library(*test, size_t{1} << 30);
  if (!so.is_ok()) return b;
  b.kernel_so = std::move(so).value();
  b.reference_so = std::move(test->reference_so.data);
  b.registers = test->build.registers;
  b.ok = true;
  return b;
}

// Builds every item on `threads` threads.
std::vector<Built> build_all(kiln::compiler::CompileHandler& compiler, const kiln::proto::FileMap& files,
                             const std::string& prefix, const std::vector<std::map<std::string, std::string>>& combos,
                             int threads) {
  std::vector<Built> out(combos.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < combos.size(); i = next++) {
        out[i] = build_one(compiler, files, prefix + "/" + std::to_string(i), combos[i]);
      }
    });
  }
  for (auto& t : pool) t.join();
  return out;
}

// Device tensors of one benchmark case, filled from the task's init rules.
struct CaseTensors {
  std::vector<HostTensor> host_in, host_out;
  std::vector<kiln::cuda::DeviceBuffer> in, out;
  std::vector<kiln_tensor> in_desc, out_desc;
  std::vector<const char*> scalar_names;
  std::vector<double> scalar_values;
  int64_t bytes = 0;

  kiln_args args(cudaStream_t stream) {
    kiln_args a{};
    a.inputs = in_desc.data();
    a.n_inputs = static_cast<int32_t>(in_desc.size());
    a.outputs = out_desc.data();
    a.n_outputs = static_cast<int32_t>(out_desc.size());
    a.scalar_names = scalar_names.data();
    a.scalar_values = scalar_values.data();
    a.n_scalars = static_cast<int32_t>(scalar_names.size());
    a.stream = stream;
    return a;
  }
};

kiln_tensor descriptor(const HostTensor& h, void* data) {
  kiln_tensor t{};
  t.data = data;
  t.dtype = static_cast<int32_t>(h.dtype());
  t.ndim = static_cast<int32_t>(h.shape().size());
  for (size_t d = 0; d < h.shape().size(); ++d) t.shape[d] = h.shape()[d];
  return t;
}

CaseTensors make_case(const kiln::task::TaskSpec& spec, const kiln::task::Dims& dims) {
  CaseTensors c;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const auto& t = spec.inputs[i];
    auto shape = kiln::task::shape_for(t, dims);
    check(shape.status(), "shape of " + t.name);
    c.host_in.emplace_back(t.dtype, *shape);
    c.host_in.back().fill(t.init, t.init_a, t.init_b, 1000 + i);
  }
  for (const auto& t : spec.outputs) {
    auto shape = kiln::task::shape_for(t, dims);
    check(shape.status(), "shape of " + t.name);
    c.host_out.emplace_back(t.dtype, *shape);
  }
  for (auto& h : c.host_in) {
    auto b = kiln::cuda::DeviceBuffer::allocate(h.bytes());
    check(b.status(), "cudaMalloc");
    CUDA_OR_DIE(cudaMemcpy(b->data(), h.data(), h.bytes(), cudaMemcpyHostToDevice));
    c.in_desc.push_back(descriptor(h, b->data()));
    c.in.push_back(std::move(b).value());
    c.bytes += static_cast<int64_t>(h.bytes());
  }
  for (auto& h : c.host_out) {
    auto b = kiln::cuda::DeviceBuffer::allocate(h.bytes());
    check(b.status(), "cudaMalloc");
    c.out_desc.push_back(descriptor(h, b->data()));
    c.out.push_back(std::move(b).value());
    c.bytes += static_cast<int64_t>(h.bytes());
  }
  for (const auto& [name, value] : spec.scalars) {
    c.scalar_names.push_back(name.c_str());
    c.scalar_values.push_back(value);
  }
  return c;
}

std::vector<HostTensor> download_outputs(const CaseTensors& c) {
  std::vector<HostTensor> out = c.host_out;
  for (size_t i = 0; i < out.size(); ++i) {
    CUDA_OR_DIE(cudaMemcpy(out[i].data(), c.out[i].data(), out[i].bytes(), cudaMemcpyDeviceToHost));
  }
  return out;
}

// A shared object written to a file and loaded.
kiln::eval::KernelLibrary load(const std::string& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir + "/" + name + ".so";
  check(kiln::write_file_atomic(path, bytes), "write " + path);
  auto lib = kiln::eval::KernelLibrary::open(path);
  check(lib.status(), "load " + path);
  return std::move(lib).value();
}

struct Sweep {
  json variants = json::array();
  json best;
  double best_us = 0;
};

// Builds, checks and times every combination of `task`'s parameters on its benchmark case.
Sweep sweep_task(const std::string& task, kiln::compiler::CompileHandler& compiler, const std::string& dir,
                 cudaStream_t stream, kiln::cuda::DeviceBuffer& flush, int build_threads, CaseTensors** keep) {
  auto files = kiln::task::load_package(std::string(KILN_SOURCE_DIR_FOR_BENCH "/configs/tasks/") + task);
  check(files.status(), task);
  auto spec = kiln::task::parse_task(*files);
  check(spec.status(), task);
  const auto combos = combinations(*spec);
  const auto t0 = Clock::now();
  std::vector<Built> built = build_all(compiler, *files, task, combos, build_threads);
  std::fprintf(stderr, "%s: %zu variants built in %.1f s\n", task.c_str(), combos.size(), seconds_since(t0));

  static std::vector<std::unique_ptr<CaseTensors>> cases;
  cases.push_back(std::make_unique<CaseTensors>(make_case(*spec, spec->benchmark_cases.at(0))));
  CaseTensors& c = *cases.back();
  if (keep) *keep = &c;
  kiln_args args = c.args(stream);

  Sweep s;
  auto reference = load(dir, task + "-reference", built.at(0).reference_so);
  CUDA_OR_DIE(reference.entry()(&args) == 0 ? cudaSuccess : cudaErrorUnknown);
  CUDA_OR_DIE(cudaDeviceSynchronize());
  const std::vector<HostTensor> expected = download_outputs(c);
  const double ref_us = time_us(stream, flush, [&] { reference.entry()(&args); });

  for (size_t i = 0; i < built.size(); ++i) {
    json v{{"params", params_text(built[i].params)}, {"registers", built[i].registers}};
    if (!built[i].ok) {
      v["error"] = built[i].error;
      s.variants.push_back(v);
      continue;
    }
    auto lib = load(dir, task + "-" + std::to_string(i), built[i].kernel_so);
    CUDA_OR_DIE(cudaMemset(c.out[0].data(), 0xff, c.out[0].bytes()));
    const int rc = lib.entry()(&args);
    CUDA_OR_DIE(cudaDeviceSynchronize());
    kiln::eval::Comparison cmp;
    const auto got = download_outputs(c);
    for (size_t o = 0; o < got.size(); ++o) {
      kiln::eval::compare(got[o], expected[o], spec->rtol, spec->atol, "out", task, 1, cmp);
    }
    v["correct"] = rc == 0 && cmp.mismatches == 0;
    if (rc != 0 || cmp.mismatches != 0) {
      s.variants.push_back(v);
      continue;
    }
    const double us = time_us(stream, flush, [&] { lib.entry()(&args); });
    v["median_us"] = us;
    v["bandwidth_gbps"] = c.bytes / us / 1e3;
    s.variants.push_back(v);
    if (s.best_us == 0 || us < s.best_us) {
      s.best_us = us;
      s.best = v;
    }
  }
  s.best["reference_us"] = ref_us;
  s.best["bytes_moved"] = c.bytes;
  s.best["variants"] = built.size();
  return s;
}

double copy_bandwidth_gbps(cudaStream_t stream, kiln::cuda::DeviceBuffer& flush) {
  constexpr size_t kBytes = size_t{1} << 30;
  auto a = kiln::cuda::DeviceBuffer::allocate(kBytes);
  auto b = kiln::cuda::DeviceBuffer::allocate(kBytes);
  check(a.status(), "cudaMalloc");
  check(b.status(), "cudaMalloc");
  CUDA_OR_DIE(cudaMemset(a->data(), 1, kBytes));
  const double us = time_us(stream, flush, [&] {
    CUDA_OR_DIE(cudaMemcpyAsync(b->data(), a->data(), kBytes, cudaMemcpyDeviceToDevice, stream));
  });
  return 2.0 * kBytes / us / 1e3;
}

json compiler_farm(const std::string& cache_root) {
  auto files = kiln::task::load_package(KILN_SOURCE_DIR_FOR_BENCH "/configs/tasks/cuda_reduce_sum");
  check(files.status(), "cuda_reduce_sum");
  json out = json::object();
  double single_rate = 0;
  int salt = 0;
  for (int replicas : {1, 4, 8}) {
    kiln::compiler::CompilerOptions o;
    o.cache_dir = cache_root + "/farm-" + std::to_string(replicas);
    auto compiler = kiln::compiler::CompileHandler::create(o, nullptr);
    check(compiler.status(), "compiler");
    // Warm the reference's cache entry and the toolchain query, so that each job is one kernel build.
    build_one(**compiler, *files, "warm", {{"KILN_SALT", "0"}});
    const int jobs = replicas == 1 ? 6 : 2 * replicas;
    std::vector<std::map<std::string, std::string>> combos;
    for (int j = 0; j < jobs; ++j) combos.push_back({{"KILN_SALT", std::to_string(++salt)}});
    const auto t0 = Clock::now();
    auto built = build_all(**compiler, *files, "farm", combos, replicas);
    const double wall = seconds_since(t0);
    int ok = 0;
    for (const auto& b : built) ok += b.ok;
    const double rate = ok / wall;
    if (replicas == 1) single_rate = rate;
    out[std::to_string(replicas)] = {{"jobs", jobs},
                                     {"ok", ok},
                                     {"wall_s", wall},
                                     {"builds_per_s", rate},
                                     {"speedup_vs_1", single_rate > 0 ? rate / single_rate : 0}};
    if (replicas == 1) {
      const auto h0 = Clock::now();
      auto again = build_one(**compiler, *files, "hit", combos[0]);
      out["cache_hit_ms"] = seconds_since(h0) * 1e3;
      out["cache_hit_ok"] = again.ok;
    }
  }
  out["cores"] = std::thread::hardware_concurrency();
  return out;
}

json tester_overhead(kiln::compiler::CompileHandler& compiler, const std::string& eval_binary) {
  auto files = kiln::task::load_package(KILN_SOURCE_DIR_FOR_BENCH "/configs/tasks/cuda_transpose");
  check(files.status(), "cuda_transpose");
  // The same task with a tiny benchmark case, so the evaluation is almost all overhead.
  std::string yaml = files->at("task.yaml").data;
  const auto at = yaml.find("cases: [{R: 8192, C: 8192}]");
  if (at != std::string::npos) yaml.replace(at, 27, "cases: [{R: 64, C: 64}]");
  (*files)["task.yaml"].data = yaml;
  auto built = compiler.compile(request_for(*files, "overhead", {}));
  if (built.next.size() != 1 || built.next[0].service != "test.cuda") die("tester overhead: build failed");
  auto test = kiln::proto::decode<kiln::proto::TestRequest>(built.next[0].payload.data);
  check(test.status(), "decode");
  kiln::tester::TesterOptions o;
  o.backend = kiln::proto::Backend::kCuda;
  o.eval_binary = eval_binary;
  o.timing.min_samples = 1;
  o.timing.min_time_s = 0;
  o.timing.max_time_s = 0.001;
  o.timing.warmup_iters = 0;
  auto tester = kiln::tester::TestHandler::create(o);
  check(tester.status(), "tester");
  std::vector<double> walls, child;
  std::string status;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    auto r = (*tester)->evaluate(*test);
    walls.push_back(seconds_since(t0) * 1e3);
    check(r.status(), "evaluate");
    status = kiln::proto::word_of(r->status);
    child.push_back(r->duration_s * 1e3);
  }
  return {{"status", status},
          {"evaluations", walls.size()},
          {"median_wall_ms", median(walls)},
          {"median_child_ms", median(child)},
          {"walls_ms", walls},
          {"what",
           "one evaluation of cuda_transpose program 0 with a 64x64 benchmark case and a minimal timing "
           "loop: spawn, CUDA context, dlopen, 9 correctness runs x 3 calls, recheck"}};
}

json sgemm_vs_cublas(kiln::compiler::CompileHandler& compiler, const std::string& dir, cudaStream_t stream,
                     kiln::cuda::DeviceBuffer& flush, int build_threads) {
  CaseTensors* c = nullptr;
  Sweep s = sweep_task("cuda_sgemm", compiler, dir, stream, flush, build_threads, &c);
  const int m = static_cast<int>(c->host_in[0].shape()[0]);
  const int k = static_cast<int>(c->host_in[0].shape()[1]);
  const int n = static_cast<int>(c->host_in[1].shape()[1]);
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) die("cublasCreate");
  cublasSetStream(handle, stream);
  const float one = 1, zero = 0;
  const double cublas_us = time_us(stream, flush, [&] {
    cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, static_cast<const float*>(c->in[1].data()), n,
                static_cast<const float*>(c->in[0].data()), k, &zero, static_cast<float*>(c->out[0].data()), n);
  });
  cublasDestroy(handle);
  const double flop = 2.0 * m * n * k;
  json out = s.best;
  out["cublas_us"] = cublas_us;
  out["cublas_tflops"] = flop / cublas_us / 1e6;
  out["best_tflops"] = s.best_us > 0 ? flop / s.best_us / 1e6 : 0;
  out["best_over_cublas_time"] = s.best_us > 0 ? cublas_us / s.best_us : 0;
  out["all"] = s.variants;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path;
  std::string only;  // a comma list of sections, empty for all
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--out")
      out_path = argv[i + 1];
    else if (std::string(argv[i]) == "--only")
      only = argv[i + 1];
  }
  auto wanted = [&](const std::string& section) { return only.empty() || only.find(section) != std::string::npos; };
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  kiln::TempDir scratch("kiln-roofline");
  kiln::compiler::CompilerOptions co;
  co.cache_dir = scratch.path() + "/cache";
  auto compiler = kiln::compiler::CompileHandler::create(co, nullptr);
  check(compiler.status(), "compiler");

  auto stream = kiln::cuda::Stream::create();
  check(stream.status(), "stream");
  int device = 0, l2 = 0;
  CUDA_OR_DIE(cudaGetDevice(&device));
  CUDA_OR_DIE(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  auto flush = kiln::cuda::DeviceBuffer::allocate(2 * static_cast<size_t>(l2));
  check(flush.status(), "flush buffer");

  json report;
  report["gpu"] = kiln::cuda::cuda_worker_info().device_name;
  const auto worker = kiln::cuda::cuda_worker_info();
  report["driver"] = worker.driver_version;
  report["runtime"] = worker.runtime_version;
  const double copy = copy_bandwidth_gbps(stream->get(), *flush);
  report["copy_bandwidth_gbps"] = copy;
  std::fprintf(stderr, "copy: %.0f GB/s\n", copy);

  if (wanted("memory")) {
    for (const char* task : {"cuda_rmsnorm", "cuda_softmax", "cuda_reduce_sum", "cuda_transpose"}) {
      Sweep s = sweep_task(task, **compiler, scratch.path(), stream->get(), *flush, cores, nullptr);
      json best = s.best;
      best["fraction_of_copy"] = best.contains("bandwidth_gbps") ? best["bandwidth_gbps"].get<double>() / copy : 0;
      best["all"] = s.variants;
      report["memory_bound"][task] = best;
      std::fprintf(stderr, "%s: best %s: %.1f us, %.0f GB/s = %.2f of copy (reference %.1f us)\n", task,
                   best.value("params", std::string("?")).c_str(), s.best_us, best.value("bandwidth_gbps", 0.0),
                   best["fraction_of_copy"].get<double>(), best.value("reference_us", 0.0));
    }
  }
  if (wanted("sgemm")) {
    report["sgemm"] = sgemm_vs_cublas(**compiler, scratch.path(), stream->get(), *flush, cores);
    std::fprintf(stderr, "sgemm: best %s: %.2f TFLOP/s; cuBLAS %.2f TFLOP/s\n",
                 report["sgemm"].value("params", std::string("?")).c_str(), report["sgemm"].value("best_tflops", 0.0),
                 report["sgemm"].value("cublas_tflops", 0.0));
  }
  if (wanted("tester")) {
    report["tester_overhead"] = tester_overhead(**compiler, KILN_BINARY_DIR_FOR_BENCH "/bin/kiln-eval-cuda");
    std::fprintf(stderr, "tester overhead: %.0f ms per candidate\n",
                 report["tester_overhead"]["median_wall_ms"].get<double>());
  }
  if (wanted("farm")) {
    report["compiler_farm"] = compiler_farm(scratch.path());
    std::fprintf(stderr, "compiler farm: %s\n", report["compiler_farm"].dump().c_str());
  }
  const std::string text = report.dump(2);
  if (out_path.empty()) {
    std::puts(text.c_str());
  } else {
    std::ofstream(out_path) << text << "\n";
  }
  return 0;
}
