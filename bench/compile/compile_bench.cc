// kiln-bench-compile: what a CUDA build costs through the compiler service, cache missed.
//
//  - per bundled CUDA task and nvcc mode (graph: nvcc's steps as a graph; serial: nvcc itself), `--reps`
//    builds one at a time, the modes taking turns, each a cache miss (a -D flag no source reads makes each one new);
//    the reference's build is warmed first, so a build is the candidate's: accept, write, compile, read back;
//  - `--huge-pages both` runs each mode with and without the tools' heap on huge pages; `--keep-builds DIR`
//    keeps each task's first build per mode (to compare what the modes built);
//  - the compiler farm in the first mode: builds per second with 1, 2, 4... concurrent builders, up to
//    `--max-builders` (default: the cores), and the speedup over one builder; with the CPU time the
//    builds' tools took (their processes' user + system time), the cores they kept busy, and the rate the
//    machine's CPUs would allow at that cost per build;
//  - `--batch-max K`: the farm's compiler builds the CUDA candidates of one task that arrive together as
//    one translation unit of up to K parameter sets (kiln/compiler/batch.h), its jobs coming K at a time
//    per task as a tuner's campaign sends them; every variant counts as a build;
//  - `--builds-per-builder K` (default 4): each farm round's length; besides the round's rate, its
//    steady rate: the builds done until the last job was taken, over that time (a finite round ends with
//    fewer builds in flight than builders, a farm fed without end does not);
//  - the machine: CPUs (hardware threads) and physical cores.
//
// JSON on stdout. No GPU needed; nvcc is.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <set>
#include <thread>
#include <vector>

#include <sys/resource.h>

#include "CLI/CLI.hpp"
#include "measure.h"
#include "kiln/compiler/handler.h"
#include "kiln/core/files.h"
#include "kiln/log/log.h"
#include "kiln/proto/payloads.h"
#include "kiln/proto/wire.h"
#include "kiln/task/task.h"
#include "nlohmann/json.hpp"

namespace {

using kiln::bench::children_cpu_s;
using kiln::bench::median;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Physical cores: distinct sets of hardware threads that share one (0 where the topology is not readable).
int physical_cores() {
  std::set<std::string> cores;
  for (unsigned cpu = 0; cpu < 4096; ++cpu) {
    auto siblings =
        kiln::read_file("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/thread_siblings_list", 4096);
    if (!siblings.is_ok()) break;
    cores.insert(*siblings);
  }
  return static_cast<int>(cores.size());
}

struct Task {
  std::string name;
  kiln::proto::FileMap files;
  std::string kernel_file;
};

struct Build {
  bool ok = false;
  double wall_s = 0;      // the compile() call
  double cpu_s = 0;       // its tools' user + system time (meaningful with one build at a time)
  double compiler_s = 0;  // the compiler's run (BuildInfo::duration_s)
  std::string error;
  std::string so;  // the kernel's shared object
};

Build build_one(kiln::compiler::CompileHandler& compiler, const Task& task, int salt) {
  kiln::proto::CompileRequest req;
  req.cand.campaign_id = "bench-compile";
  req.cand.program_id = task.name + "/" + std::to_string(salt);
  req.cand.code = task.files.at(task.kernel_file).data;
  req.cand.params = {{"KILN_BENCH_SALT", std::to_string(salt)}};
  req.backend = kiln::proto::Backend::kCuda;
  req.files = task.files;
  const double cpu0 = children_cpu_s();
  const auto t0 = Clock::now();
  auto out = compiler.compile(req);
  Build b;
  b.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  b.cpu_s = children_cpu_s() - cpu0;
  if (out.next.size() != 1 || out.next[0].service != "test.cuda") {
    b.error = out.error.empty() ? "the build failed" : out.error.substr(0, 300);
    if (!out.next.empty()) {
      auto score = kiln::proto::decode<kiln::proto::ScoreResult>(out.next[0].payload.data);
      if (score.is_ok()) b.error = score->error.substr(0, 300);
    }
    return b;
  }
  auto test = kiln::proto::decode<kiln::proto::TestRequest>(out.next[0].payload.data);
  if (!test.is_ok()) return b;
  b.ok = test->build.ok && !test->build.cache_hit;
  b.compiler_s = test->build.duration_s;
  if (auto so = kiln::proto::kernel_library(*test, 256u << 20); so.is_ok()) b.so = std::move(so).value();
  return b;
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// A mode as the bench names it: "graph" or "serial", with "/no-huge-pages" where the tools' heap is not asked
// for huge pages (compiler.huge_pages: off) and "/no-lean" where builds keep every header
// (compiler.lean_headers: off).
struct Variant {
  std::string mode;
  bool huge_pages = true;
  bool lean_headers = true;
  std::string name() const { return mode + (huge_pages ? "" : "/no-huge-pages") + (lean_headers ? "" : "/no-lean"); }
};

std::unique_ptr<kiln::compiler::CompileHandler> make_compiler(const std::string& nvcc, const Variant& variant,
                                                              const std::string& cache, int batch_max = 1,
                                                              double batch_window_s = 0.05, int batch_cores = 0) {
  kiln::compiler::CompilerOptions o;
  o.batch_max = batch_max;
  o.batch_window_s = batch_window_s;
  o.batch_cores = batch_cores;
  o.nvcc = nvcc;
  o.nvcc_mode = variant.mode;
  o.huge_pages = variant.huge_pages;
  o.lean_headers = variant.lean_headers;
  o.cache_dir = cache;
  auto c = kiln::compiler::CompileHandler::create(o, nullptr);
  if (!c.is_ok()) {
    std::fprintf(stderr, "compiler: %s\n", c.status().message().c_str());
    std::exit(2);
  }
  return std::move(c).value();
}

}  // namespace

int main(int argc, char** argv) {
  kiln::log::init("kiln-bench-compile");  // the compiler's log to stderr: stdout is the JSON
  CLI::App app{"kiln-bench-compile: CUDA builds through the compiler service, cache missed"};
  std::string tasks_dir = "configs/tasks";
  std::string nvcc = "/usr/local/cuda/bin/nvcc";
  std::vector<std::string> modes = {"graph", "serial"};
  int reps = 5;
  int max_builders = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  app.add_option("--tasks", tasks_dir, "folder of task packages; the cuda ones are built");
  app.add_option("--nvcc", nvcc, "nvcc");
  app.add_option("--modes", modes, "nvcc modes to compare, one builder each (the first also runs the farm)");
  std::string keep_builds;
  app.add_option("--keep-builds", keep_builds, "folder: each task's first build per mode kept as <task>.<mode>.so");
  std::string huge_pages = "on";
  app.add_option("--huge-pages", huge_pages,
                 "on | off | both: each mode with the tools' heap on huge pages, not, or both")
      ->check(CLI::IsMember({"on", "off", "both"}));
  std::string lean_headers = "on";
  app.add_option("--lean-headers", lean_headers,
                 "on | off | both: each mode without the C++17 special math functions where unused, with "
                 "every header, or both")
      ->check(CLI::IsMember({"on", "off", "both"}));
  bool farm_all = false;
  app.add_flag("--farm-all", farm_all,
               "the farm runs every variant, taking turns at each number of builders (else the first only)");
  app.add_option("--reps", reps, "builds per task and mode")->check(CLI::PositiveNumber);
  app.add_option("--max-builders", max_builders, "the farm's most concurrent builders (0: no farm)");
  int batch_max = 1;
  int batch_window_ms = 50;
  int batch_cores = 0;
  app.add_option("--batch-max", batch_max,
                 "the farm's builds of one task that arrive together are built as batches of up to this many "
                 "parameter sets (compiler.batch_max; 1: each alone); its jobs then come a task at a time")
      ->check(CLI::Range(1, 64));
  app.add_option("--batch-window-ms", batch_window_ms, "how long a batch's first build waits for the others")
      ->check(CLI::Range(0, 10000));
  app.add_option("--batch-cores", batch_cores,
                 "batches form when the builds in flight ask for more than 3/4 of this many cores "
                 "(compiler.batch_cores; 0: this machine's; 1: whenever two builds are in flight)")
      ->check(CLI::Range(0, 4096));
  int builds_per_builder = 4;
  app.add_option("--builds-per-builder", builds_per_builder, "each farm round's jobs per builder (at least)")
      ->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  if (!keep_builds.empty()) {
    if (auto made = kiln::make_dirs(keep_builds); !made.is_ok()) {
      std::fprintf(stderr, "--keep-builds: %s\n", made.message().c_str());
      return 2;
    }
  }
  std::vector<Variant> variants;
  for (const auto& mode : modes) {
    for (const bool huge : {true, false}) {
      if (huge_pages != (huge ? "off" : "on")) {
        if (lean_headers != "off") variants.push_back({mode, huge, true});
        if (lean_headers != "on") variants.push_back({mode, huge, false});
      }
    }
  }

  std::vector<Task> tasks;
  std::vector<std::filesystem::path> dirs;
  for (const auto& entry : std::filesystem::directory_iterator(tasks_dir)) dirs.push_back(entry.path());
  std::sort(dirs.begin(), dirs.end());
  for (const auto& dir : dirs) {
    auto files = kiln::task::load_package(dir.string());
    if (!files.is_ok()) continue;
    auto spec = kiln::task::parse_task(*files);
    if (!spec.is_ok() || spec->backend != kiln::proto::Backend::kCuda) continue;
    tasks.push_back({dir.filename().string(), *files, spec->kernel_file});
  }
  if (tasks.empty()) {
    std::fprintf(stderr, "no cuda task in %s\n", tasks_dir.c_str());
    return 2;
  }

  kiln::TempDir scratch("kiln-bench-compile");
  json report = {{"cores", std::thread::hardware_concurrency()}, {"reps", reps}, {"nvcc", nvcc}};
  int salt = 0;
  // The variants take turns, build by build, so that a drift of the machine (another tenant, the file
  // cache, the clocks) weighs on each of them alike.
  std::vector<std::unique_ptr<kiln::compiler::CompileHandler>> compilers;
  for (size_t v = 0; v < variants.size(); ++v) {
    compilers.push_back(make_compiler(nvcc, variants[v], scratch.path() + "/cache-" + std::to_string(v)));
  }
  std::vector<json> per_task(variants.size(), json::object());
  std::vector<std::vector<double>> medians(variants.size()), cpu_medians(variants.size());
  for (const auto& task : tasks) {
    std::vector<std::vector<double>> walls(variants.size()), compiler_s(variants.size()), cpu_s(variants.size());
    std::vector<int> failed(variants.size(), 0);
    std::vector<std::string> error(variants.size());
    for (auto& c : compilers) build_one(*c, task, ++salt);  // the reference, the toolchain's version, the plan
    for (int r = 0; r < reps; ++r) {
      for (size_t v = 0; v < variants.size(); ++v) {
        Build b = build_one(*compilers[v], task, ++salt);
        if (!b.ok) {
          ++failed[v];
          error[v] = b.error;
          continue;
        }
        walls[v].push_back(b.wall_s);
        cpu_s[v].push_back(b.cpu_s);
        compiler_s[v].push_back(b.compiler_s);
        if (r == 0 && !keep_builds.empty()) {
          std::string name = variants[v].name();
          std::replace(name.begin(), name.end(), '/', '-');
          auto kept = kiln::write_file_atomic(keep_builds + "/" + task.name + "." + name + ".so", b.so);
          if (!kept.is_ok()) std::fprintf(stderr, "--keep-builds: %s\n", kept.message().c_str());
        }
      }
    }
    for (size_t v = 0; v < variants.size(); ++v) {
      const auto& w = walls[v];
      per_task[v][task.name] = {{"median_s", median(w)},
                                {"mean_s", mean(w)},
                                {"min_s", w.empty() ? 0 : *std::min_element(w.begin(), w.end())},
                                {"max_s", w.empty() ? 0 : *std::max_element(w.begin(), w.end())},
                                {"compiler_median_s", median(compiler_s[v])},
                                {"cpu_median_s", median(cpu_s[v])},
                                {"failed", failed[v]}};
      if (!error[v].empty()) per_task[v][task.name]["error"] = error[v];
      medians[v].push_back(median(w));
      cpu_medians[v].push_back(median(cpu_s[v]));
      std::fprintf(stderr, "%s %s: median %.3f s, %.3f CPU s\n", variants[v].name().c_str(), task.name.c_str(),
                   median(w), median(cpu_s[v]));
    }
  }
  for (size_t v = 0; v < variants.size(); ++v) {
    report["modes"][variants[v].name()] = {{"tasks", per_task[v]},
                                           {"mean_of_medians_s", mean(medians[v])},
                                           {"cpu_mean_of_medians_s", mean(cpu_medians[v])}};
  }
  compilers.clear();

  const int cpus = static_cast<int>(std::thread::hardware_concurrency());
  report["machine"] = {{"cpus", cpus}, {"physical_cores", physical_cores()}};
  if (max_builders > 0) {
    const size_t farm_variants = farm_all ? variants.size() : 1;
    std::vector<json> farms(farm_variants, json::object());
    std::vector<double> ones(farm_variants, 0), steady_ones(farm_variants, 0);
    std::vector<int> counts;
    for (int n = 1; n < max_builders; n *= 2) counts.push_back(n);
    counts.push_back(max_builders);
    for (int n : counts) {
      for (size_t v = 0; v < farm_variants; ++v) {
        double& one = ones[v];
        double& steady_one = steady_ones[v];
        json& farm = farms[v];
        auto compiler =
            make_compiler(nvcc, variants[v], scratch.path() + "/farm-" + std::to_string(v) + "-" + std::to_string(n),
                          batch_max, batch_window_ms / 1000.0, batch_cores);
        for (const auto& task : tasks) build_one(*compiler, task, ++salt);
        // Every task as often as every other (so with and without batching build the same mix).
        const int round = batch_max * static_cast<int>(tasks.size());
        const int jobs =
            (std::max(builds_per_builder * n, 2 * static_cast<int>(tasks.size())) + round - 1) / round * round;
        std::vector<int> salts(jobs);
        for (auto& s : salts) s = ++salt;
        std::atomic<int> next{0}, ok{0};
        const double cpu0 = children_cpu_s();
        const auto t0 = Clock::now();
        auto since_t0 = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
        std::mutex done_mu;
        std::vector<double> done_s;  // when each good build finished
        double dry_s = 0;            // when the last job was taken
        std::vector<std::thread> pool;
        for (int t = 0; t < n; ++t) {
          pool.emplace_back([&] {
            // Batching: runs of batch_max jobs of one task, the way a tuner's campaign sends them.
            for (int i = next++; i < jobs; i = next++) {
              if (i == jobs - 1) {
                std::lock_guard lock(done_mu);
                dry_s = since_t0();
              }
              if (build_one(*compiler, tasks[(i / batch_max) % tasks.size()], salts[i]).ok) {
                ++ok;
                std::lock_guard lock(done_mu);
                done_s.push_back(since_t0());
              }
            }
          });
        }
        for (auto& t : pool) t.join();
        const double wall = since_t0();
        const auto steady_builds = std::count_if(done_s.begin(), done_s.end(), [&](double d) { return d <= dry_s; });
        const double steady = dry_s > 0 ? static_cast<double>(steady_builds) / dry_s : 0;
        const double cpu = children_cpu_s() - cpu0;
        const double rate = ok / wall;
        const double cpu_per_build = ok > 0 ? cpu / ok : 0;
        if (n == 1) {
          one = rate;
          steady_one = steady;
        }
        const double steady_efficiency = steady_one > 0 ? steady / steady_one / n : 0;
        farm[std::to_string(n)] = {{"jobs", jobs},
                                   {"ok", ok.load()},
                                   {"wall_s", wall},
                                   {"builds_per_s", rate},
                                   {"speedup", one > 0 ? rate / one : 0},
                                   {"efficiency", one > 0 ? rate / one / n : 0},
                                   {"steady_builds_per_s", steady},
                                   {"steady_efficiency", steady_efficiency},
                                   {"cpu_s_per_build", cpu_per_build},
                                   {"cores_busy", cpu / wall},
                                   {"cpu_bound_builds_per_s", cpu_per_build > 0 ? cpus / cpu_per_build : 0}};
        std::fprintf(stderr,
                     "farm %s %d builders: %.2f builds/s (steady %.2f, %.2f per builder of one's), %.2f CPU s per "
                     "build, %.1f cores busy\n",
                     variants[v].name().c_str(), n, rate, steady, steady_efficiency, cpu_per_build, cpu / wall);
      }
    }
    report["farm"] = farms.front();
    if (farm_all) {
      for (size_t v = 0; v < farm_variants; ++v) report["farms"][variants[v].name()] = farms[v];
    }
    report["farm_mode"] = variants.front().name();
    report["farm_batch_max"] = batch_max;
    report["farm_batch_window_ms"] = batch_window_ms;
    report["farm_batch_cores"] = batch_cores;
  }
  std::printf("%s\n", report.dump(2).c_str());
  return 0;
}
