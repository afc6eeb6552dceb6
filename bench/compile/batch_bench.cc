// kiln-bench-batch: what one build serving several parameter sets saves, in CPU time per variant.
//
// For every bundled CUDA task (that batchable accepts), `--reps` rounds, each round building K variants
// (`--variants`, a -D the source does not read makes each one new) two ways, taking turns:
//  - alone: nvcc per variant, as the compiler service's serial mode runs it (`-shared`, a .so each);
//  - batched: one nvcc -c of batch_unit's translation unit, then per variant its stub compiled and a
//    shared object linked from the one object and the stub.
// CPU time is the build processes' user + system time; wall time is one after another on an idle
// machine. Every batched variant's shared object is checked to export kiln_entry. JSON on stdout. No GPU
// needed; nvcc is.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "measure.h"
#include "kiln/compiler/batch.h"
#include "kiln/compiler/handler.h"
#include "kiln/core/files.h"
#include "kiln/log/log.h"
#include "kiln/task/task.h"
#include "nlohmann/json.hpp"

namespace {

using kiln::bench::children_cpu_s;
using kiln::bench::median;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Cost {
  double cpu_s = 0, wall_s = 0;
  bool ok = true;
};

// Runs the commands one after another in `dir`; what they cost. Output goes to dir/log.
Cost run_all(const std::string& dir, const std::vector<std::string>& commands) {
  Cost c;
  const double cpu0 = children_cpu_s();
  const auto t0 = Clock::now();
  for (const auto& cmd : commands) {
    const std::string line = "cd '" + dir + "' && { " + cmd + "; } >> log 2>&1";
    if (std::system(line.c_str()) != 0) {
      c.ok = false;
      break;
    }
  }
  c.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  c.cpu_s = children_cpu_s() - cpu0;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  kiln::log::init("kiln-bench-batch");  // the compiler's log to stderr: stdout is the JSON
  CLI::App app{"kiln-bench-batch: CUDA builds of several parameter sets alone and as one translation unit"};
  std::string tasks_dir = "configs/tasks";
  std::string nvcc = "/usr/local/cuda/bin/nvcc";
  std::string arch = "sm_90";
  int variants = 4;
  int reps = 3;
  app.add_option("--tasks", tasks_dir, "folder of task packages; the cuda ones are built");
  app.add_option("--nvcc", nvcc, "nvcc");
  app.add_option("--arch", arch, "the target");
  app.add_option("--variants", variants, "parameter sets per batch")->check(CLI::Range(1, 64));
  app.add_option("--reps", reps, "rounds per task")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  const std::string cuda_lib = nvcc.substr(0, nvcc.rfind("/bin/")) + "/lib64";
  const std::string flags =
      "-O3 -Xcompiler -fPIC -gencode " + kiln::compiler::cuda_gencode(arch) + " -cudart shared -Xptxas -v -I.";

  std::vector<std::filesystem::path> dirs;
  for (const auto& entry : std::filesystem::directory_iterator(tasks_dir)) dirs.push_back(entry.path());
  std::sort(dirs.begin(), dirs.end());
  json report = {{"variants", variants}, {"reps", reps}, {"arch", arch}, {"tasks", json::object()}};
  std::vector<double> ratios;
  int failures = 0;
  int salt = 0;
  for (const auto& dir : dirs) {
    auto files = kiln::task::load_package(dir.string());
    if (!files.is_ok()) continue;
    auto spec = kiln::task::parse_task(*files);
    if (!spec.is_ok() || spec->backend != kiln::proto::Backend::kCuda) continue;
    const std::string name = dir.filename().string();
    const std::string source = files->at(spec->kernel_file).data;
    if (auto st = kiln::compiler::batchable(source, {"KILN_BENCH_SALT"}); !st.is_ok()) {
      report["tasks"][name] = {{"skipped", st.message()}};
      continue;
    }
    std::vector<double> alone_cpu, alone_wall, batch_cpu, batch_wall;
    for (int rep = 0; rep < reps; ++rep) {
      kiln::TempDir scratch("kiln-bench-batch");
      const std::string d = scratch.path();
      (void)kiln::make_dirs(d + "/kiln");
      (void)kiln::write_file(d + "/kiln/kernel_abi.h", std::string(kiln::compiler::kernel_abi_header()));
      for (const auto& [file, content] : *files) {
        (void)kiln::make_dirs(std::filesystem::path(d + "/" + file).parent_path().string());
        (void)kiln::write_file(d + "/" + file, content.data);
      }
      std::vector<kiln::compiler::Defines> sets;
      std::vector<std::string> alone;
      for (int v = 0; v < variants; ++v) {
        const std::string s = std::to_string(++salt);
        sets.push_back({{"KILN_BENCH_SALT", s}});
        alone.push_back(nvcc + " " + flags + " -shared -DKILN_BENCH_SALT=" + s + " -o alone" + std::to_string(v) +
                        ".so " + spec->kernel_file);
      }
      (void)kiln::write_file(d + "/batch.cu", kiln::compiler::batch_unit(spec->kernel_file, source, sets));
      std::vector<std::string> batched = {nvcc + " " + flags + " -c -o batch.o batch.cu"};
      for (int v = 0; v < variants; ++v) {
        const std::string sv = std::to_string(v);
        (void)kiln::write_file(d + "/stub" + sv + ".c", kiln::compiler::variant_stub(static_cast<size_t>(v)));
        batched.push_back("gcc -c -fPIC -O2 -o stub" + sv + ".o stub" + sv + ".c && g++ -shared -o v" + sv +
                          ".so batch.o stub" + sv + ".o -L" + cuda_lib + " -lcudart");
      }
      // Taking turns: alone first on even rounds, batched first on odd ones.
      Cost a, b;
      if (rep % 2 == 0) {
        a = run_all(d, alone);
        b = run_all(d, batched);
      } else {
        b = run_all(d, batched);
        a = run_all(d, alone);
      }
      std::vector<std::string> checks;
      for (int v = 0; v < variants; ++v)
        checks.push_back("nm -D --defined-only v" + std::to_string(v) + ".so | grep -q ' T kiln_entry$'");
      const bool exported = run_all(d, checks).ok;
      if (!a.ok || !b.ok || !exported) {
        ++failures;
        auto log = kiln::read_file(d + "/log");
        std::fprintf(stderr, "%s: a build failed%s\n%s\n", name.c_str(),
                     exported ? "" : " (or a kiln_entry is missing)", log.is_ok() ? log->substr(0, 2000).c_str() : "");
        continue;
      }
      alone_cpu.push_back(a.cpu_s / variants);
      alone_wall.push_back(a.wall_s / variants);
      batch_cpu.push_back(b.cpu_s / variants);
      batch_wall.push_back(b.wall_s / variants);
      std::fprintf(stderr, "%s round %d: per variant alone %.3f s CPU (%.3f wall), batched %.3f s CPU (%.3f wall)\n",
                   name.c_str(), rep + 1, a.cpu_s / variants, a.wall_s / variants, b.cpu_s / variants,
                   b.wall_s / variants);
    }
    if (alone_cpu.empty()) continue;
    const double ratio = median(batch_cpu) / median(alone_cpu);
    ratios.push_back(ratio);
    report["tasks"][name] = {{"alone_cpu_s_per_variant", median(alone_cpu)},
                             {"alone_wall_s_per_variant", median(alone_wall)},
                             {"batched_cpu_s_per_variant", median(batch_cpu)},
                             {"batched_wall_s_per_variant", median(batch_wall)},
                             {"batched_over_alone_cpu", ratio}};
  }
  report["failures"] = failures;
  if (!ratios.empty()) report["median_batched_over_alone_cpu"] = median(ratios);
  std::printf("%s\n", report.dump(2).c_str());
  return failures == 0 && !ratios.empty() ? 0 : 1;
}
