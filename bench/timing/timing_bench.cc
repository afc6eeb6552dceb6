// bench/timing: how far Kiln's measurement can be trusted, for one fixed CPU kernel (a task's program 0).
//  - spread: the candidate's median as measured by 5 separate kiln-eval runs (each a fresh sandboxed
//    process, tester defaults), against a naive "100 back-to-back calls, mean" taken by this process
//    between those runs on the same kernel and the same inputs;
//  - overhead: what one candidate costs the tester besides timing (spawning the sandbox, loading the two
//    shared objects, making the inputs, running correctness), in milliseconds.
// JSON on stdout, and to --json FILE when given.
#include <dlfcn.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/core/files.h"
#include "kiln/core/time.h"
#include "kiln/kernel_abi.h"
#include "kiln/proto/codec.h"
#include "kiln/proto/payloads.h"
#include "kiln/sandbox/sandbox.h"
#include "kiln/task/task.h"

using nlohmann::json;

namespace {

constexpr int kSpawnRepeats = 10;
constexpr int kCorrectnessRepeats = 5;
constexpr double kEvalTimeoutS = 120;

struct Options {
  std::string task_dir = KILN_SOURCE_DIR "/configs/tasks/softmax";
  std::string eval_binary;
  std::string json_file;
  std::string cxx = "g++";
  int runs = 5;
  int naive_calls = 100;
  std::string mode = "cold";
};

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

template <class T>
T value_or_fail(kiln::Result<T> r, const std::string& context) {
  if (!r.is_ok()) fail(context + ": " + r.status().message());
  return std::move(r).value();
}

// Compiles one source of the package the way the compiler service does for the CPU backend.
std::string compile(const Options& o, const std::string& dir, const std::string& source_name) {
  const std::string out = dir + "/" + std::filesystem::path(source_name).stem().string() + ".so";
  const std::string cmd =
      o.cxx + " -O3 -march=native -fopenmp -shared -fPIC -std=c++17 -I" KILN_SOURCE_DIR "/libs/core/include -o " + out +
      " " + o.task_dir + "/" + source_name;
  if (std::system(cmd.c_str()) != 0) fail("compiling " + source_name + " failed: " + cmd);
  return out;
}

struct Stats {
  double min = 0, max = 0, mean = 0, median = 0, cv = 0;
};

Stats stats_of(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - s.mean) * (x - s.mean);
  s.cv = v.size() > 1 && s.mean > 0 ? std::sqrt(ss / static_cast<double>(v.size() - 1)) / s.mean : 0;
  return s;
}

json to_json(const Stats& s, const std::string& unit) {
  return {{"min_" + unit, s.min},       {"max_" + unit, s.max}, {"mean_" + unit, s.mean},
          {"median_" + unit, s.median}, {"cv", s.cv},           {"spread_ratio", s.min > 0 ? s.max / s.min : 0}};
}

// One evaluation as the tester runs it: scratch dir, sandboxed kiln-eval, report read back.
struct EvalRun {
  kiln::proto::TestReport report;
  double tester_ms = 0;   // writing the scratch dir, the sandboxed run, reading the report
  double sandbox_ms = 0;  // the sandboxed child alone
};

EvalRun run_eval(const Options& o, const kiln::proto::FileMap& files, const std::string& kernel_so,
                 const std::string& reference_so, bool measure) {
  const double t0 = kiln::monotonic_s();
  kiln::TempDir scratch("kiln-bench-timing");
  const std::string s = scratch.path();
  for (const auto& [name, content] : files) {
    const std::string path = s + "/task/" + name;
    if (!kiln::make_dirs(std::filesystem::path(path).parent_path().string()).is_ok() ||
        !kiln::write_file_atomic(path, content.data).is_ok()) {
      fail("writing " + path);
    }
  }
  std::filesystem::copy_file(kernel_so, s + "/kernel.so");
  std::filesystem::copy_file(reference_so, s + "/reference.so");

  kiln::sandbox::SandboxOptions run;
  run.argv = {o.eval_binary,  "--task", "task",           "--kernel", "kernel.so", "--reference",
              "reference.so", "--out",  "result.msgpack", "--mode",   o.mode};
  if (!measure) run.argv.push_back("--no-timing");
  run.working_dir = s;
  run.env = {"PATH=/usr/bin:/bin", "HOME=" + s, "TMPDIR=" + s, "LC_ALL=C"};
  run.timeout_s = kEvalTimeoutS;
  run.file_size_bytes = 256ll << 20;
  run.readonly_root = true;  // as the tester: process creation is refused inside kiln-eval's runners
  auto child = value_or_fail(kiln::sandbox::run_sandboxed(run), "kiln-eval");
  if (!child.succeeded()) fail("kiln-eval: " + child.describe(run.timeout_s) + "\n" + child.stderr_text);
  auto bytes = value_or_fail(kiln::read_file(s + "/result.msgpack"), "kiln-eval result");
  EvalRun r;
  r.report = value_or_fail(kiln::proto::decode<kiln::proto::TestReport>(bytes), "kiln-eval result");
  if (r.report.status != kiln::proto::TestStatus::kOk) fail("kiln-eval: " + r.report.message);
  r.sandbox_ms = child.wall_s * 1e3;
  r.tester_ms = (kiln::monotonic_s() - t0) * 1e3;
  return r;
}

// The naive measurement: the kernel loaded in this process, the first benchmark case's fp32 inputs,
// 100 calls back to back, mean time per call.
class NaiveBench {
 public:
  NaiveBench(const kiln::task::TaskSpec& spec, const std::string& kernel_so) {
    handle_ = dlopen(kernel_so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) fail(std::string("dlopen: ") + dlerror());
    entry_ = reinterpret_cast<int (*)(const kiln_args*)>(dlsym(handle_, "kiln_entry"));
    if (!entry_) fail("no kiln_entry in " + kernel_so);
    const auto& dims = spec.benchmark_cases.at(0);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1, 1);
    auto make = [&](const kiln::task::TensorSpec& t, std::vector<std::vector<float>>& store,
                    std::vector<kiln_tensor>& out) {
      if (t.dtype != kiln::task::DType::kF32) fail("the naive bench handles fp32 tensors only ('" + t.name + "')");
      auto shape = value_or_fail(kiln::task::shape_for(t, dims), "shape of " + t.name);
      int64_t n = 1;
      kiln_tensor d{};
      d.dtype = KILN_F32;
      d.ndim = static_cast<int32_t>(shape.size());
      for (size_t i = 0; i < shape.size(); ++i) {
        d.shape[i] = shape[i];
        n *= shape[i];
      }
      store.emplace_back(static_cast<size_t>(n));
      for (float& x : store.back()) x = dist(rng);
      d.data = store.back().data();
      out.push_back(d);
    };
    for (const auto& t : spec.inputs) make(t, input_data_, inputs_);
    for (const auto& t : spec.outputs) make(t, output_data_, outputs_);
    for (const auto& [name, value] : spec.scalars) {
      scalar_names_.push_back(name.c_str());
      scalar_values_.push_back(value);
    }
    args_.inputs = inputs_.data();
    args_.n_inputs = static_cast<int32_t>(inputs_.size());
    args_.outputs = outputs_.data();
    args_.n_outputs = static_cast<int32_t>(outputs_.size());
    args_.scalar_names = scalar_names_.data();
    args_.scalar_values = scalar_values_.data();
    args_.n_scalars = static_cast<int32_t>(scalar_names_.size());
  }
  ~NaiveBench() {
    if (handle_) dlclose(handle_);
  }
  NaiveBench(const NaiveBench&) = delete;
  NaiveBench& operator=(const NaiveBench&) = delete;

  double mean_us(int calls) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) entry_(&args_);
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls;
  }

 private:
  void* handle_ = nullptr;
  int (*entry_)(const kiln_args*) = nullptr;
  std::vector<std::vector<float>> input_data_, output_data_;
  std::vector<kiln_tensor> inputs_, outputs_;
  std::vector<const char*> scalar_names_;
  std::vector<double> scalar_values_;
  kiln_args args_{};
};

// Time to start and reap a trivial sandboxed child: the supervisor, the namespaces, exec.
double spawn_ms() {
  kiln::sandbox::SandboxOptions run;
  run.argv = {"/bin/true"};
  run.readonly_root = true;  // as the tester: process creation is refused inside kiln-eval's runners
  std::vector<double> ms;
  for (int i = 0; i < kSpawnRepeats; ++i) {
    auto r = value_or_fail(kiln::sandbox::run_sandboxed(run), "/bin/true");
    ms.push_back(r.wall_s * 1e3);
  }
  return stats_of(ms).median;
}

// dlopen + dlsym of both shared objects, in this process (what kiln-eval does before the inputs).
double load_ms(const std::string& kernel_so, const std::string& reference_so) {
  // Copies, so that the loader really maps them (the originals may be loaded already).
  kiln::TempDir dir("kiln-bench-load");
  std::vector<double> ms;
  for (int i = 0; i < kSpawnRepeats; ++i) {
    const std::string k = dir.path() + "/k" + std::to_string(i) + ".so";
    const std::string r = dir.path() + "/r" + std::to_string(i) + ".so";
    std::filesystem::copy_file(kernel_so, k);
    std::filesystem::copy_file(reference_so, r);
    const double t0 = kiln::monotonic_s();
    void* a = dlopen(r.c_str(), RTLD_NOW | RTLD_LOCAL);
    void* b = dlopen(k.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!a || !b || !dlsym(a, "kiln_entry") || !dlsym(b, "kiln_entry")) fail("dlopen of a copy failed");
    ms.push_back((kiln::monotonic_s() - t0) * 1e3);
    dlclose(b);
    dlclose(a);
  }
  return stats_of(ms).median;
}

json run(const Options& o) {
  auto files = value_or_fail(kiln::task::load_package(o.task_dir), "task " + o.task_dir);
  auto spec = value_or_fail(kiln::task::parse_task(files), "task " + o.task_dir);
  if (spec.backend != kiln::proto::Backend::kCpu) fail("task '" + spec.name + "' is not a cpu task");
  kiln::TempDir build("kiln-bench-timing-build");
  const std::string kernel_so = compile(o, build.path(), spec.kernel_file);
  const std::string reference_so = compile(o, build.path(), spec.reference_file);

  NaiveBench naive(spec, kernel_so);
  naive.mean_us(10);  // warm-up: page faults, OpenMP pool
  std::vector<double> kiln_us, naive_us, kiln_ref_us, speedups;
  json runs = json::array();
  kiln::proto::WorkerInfo worker;
  for (int i = 0; i < o.runs; ++i) {
    EvalRun r = run_eval(o, files, kernel_so, reference_so, true);
    const auto& c = r.report.performance.cases.at(0);
    worker = r.report.worker;
    const double naive_mean = naive.mean_us(o.naive_calls);
    kiln_us.push_back(c.candidate.median_us);
    kiln_ref_us.push_back(c.reference.median_us);
    speedups.push_back(c.speedup);
    naive_us.push_back(naive_mean);
    runs.push_back({{"kiln_median_us", c.candidate.median_us},
                    {"kiln_cv", c.candidate.cv},
                    {"kiln_samples", c.candidate.n},
                    {"kiln_stop_reason", c.stop_reason},
                    {"reference_median_us", c.reference.median_us},
                    {"speedup", c.speedup},
                    {"speedup_lo", c.speedup_lo},
                    {"speedup_hi", c.speedup_hi},
                    {"naive_mean_us", naive_mean},
                    {"eval_wall_ms", r.sandbox_ms}});
  }

  std::vector<double> tester_ms, sandbox_ms, internal_ms;
  for (int i = 0; i < kCorrectnessRepeats; ++i) {
    EvalRun r = run_eval(o, files, kernel_so, reference_so, false);
    tester_ms.push_back(r.tester_ms);
    sandbox_ms.push_back(r.sandbox_ms);
    internal_ms.push_back(r.report.duration_s * 1e3);
  }
  const double spawn = spawn_ms();
  const double load = load_ms(kernel_so, reference_so);
  const double tester = stats_of(tester_ms).median;
  const double sandboxed = stats_of(sandbox_ms).median;
  const double internal = stats_of(internal_ms).median;

  return {
      {"bench", "timing"},
      {"task", spec.name},
      {"kernel", spec.kernel_file + " (program 0, default params)"},
      {"benchmark_case", kiln::task::dims_string(spec.benchmark_cases.at(0))},
      {"mode", o.mode},
      {"host", worker.host},
      {"cpu", worker.device_name},
      {"runs", runs},
      {"kiln_median_us", to_json(stats_of(kiln_us), "us")},
      {"naive_mean_us", to_json(stats_of(naive_us), "us")},
      {"reference_median_us", to_json(stats_of(kiln_ref_us), "us")},
      {"speedup", to_json(stats_of(speedups), "x")},
      {"overhead_ms",
       {{"tester_total", tester},
        {"sandboxed_child", sandboxed},
        {"spawn_sandbox_true", spawn},
        {"load_both_so", load},
        {"inputs_and_correctness", std::max(0.0, internal - load)},
        {"kiln_eval_internal", internal},
        {"process_start_and_exit", std::max(0.0, sandboxed - internal)},
        {"scratch_dir_and_report", std::max(0.0, tester - sandboxed)}}},
      {"notes",
       "kiln_median_us: the candidate's median from each of the separate kiln-eval runs (tester defaults). "
       "naive_mean_us: 100 back-to-back calls in this process on the same inputs, taken after each run. "
       "overhead_ms: medians over " +
           std::to_string(kCorrectnessRepeats) +
           " correctness-only runs; "
           "spawn is a sandboxed /bin/true; load is dlopen of both objects in this process."},
  };
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"kiln-bench-timing: spread of Kiln's CPU timing vs a naive mean, and the tester's overhead"};
  app.add_option("--task", o.task_dir, "CPU task package (its program 0 is timed)");
  app.add_option("--eval", o.eval_binary, "kiln-eval binary (default: next to this one)");
  app.add_option("--runs", o.runs, "separate kiln-eval runs")->check(CLI::PositiveNumber);
  app.add_option("--naive-calls", o.naive_calls, "calls in the naive mean")->check(CLI::PositiveNumber);
  app.add_option("--mode", o.mode, "timing mode")->check(CLI::IsMember({"cold", "warm"}));
  app.add_option("--cxx", o.cxx, "C++ compiler");
  app.add_option("--json", o.json_file, "also write the JSON here");
  CLI11_PARSE(app, argc, argv);
  if (o.eval_binary.empty()) {
    o.eval_binary = (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "kiln-eval").string();
  }
  try {
    json out = run(o);
    const std::string text = out.dump(2);
    std::printf("%s\n", text.c_str());
    if (!o.json_file.empty() && !kiln::write_file_atomic(o.json_file, text + "\n").is_ok()) {
      std::fprintf(stderr, "kiln-bench-timing: cannot write %s\n", o.json_file.c_str());
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln-bench-timing: %s\n", e.what());
    return 1;
  }
  return 0;
}
