// `kiln task new NAME`: a working CPU task package to start from (y = alpha * x + beta).
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "commands.h"
#include "kiln/core/files.h"

namespace kiln::cli {

namespace {

constexpr const char* kTaskYaml = R"(name: {{NAME}}
op: {{NAME}}
backend: cpu
dtype: fp32
inputs:
  - {name: x, dtype: fp32, shape: [N], init: normal}
outputs:
  - {name: y, dtype: fp32, shape: [N]}
scalars: {alpha: 2.0, beta: 0.5}
correctness:
  cases: [{N: 1}, {N: 1000}, {N: 65537}]
  seeds: 3
  rtol: 1.0e-5
  atol: 1.0e-6
benchmark:
  cases: [{N: 4194304}]
params:
  THREADS: [1, 2]
  UNROLL: [1, 4, 8]
)";

constexpr const char* kReference = R"(// Trusted reference: y = alpha * x + beta, one element at a time.
#include <kiln/kernel_abi.h>

extern "C" int kiln_entry(const kiln_args* a) {
  const float* x = static_cast<const float*>(a->inputs[0].data);
  float* y = static_cast<float*>(a->outputs[0].data);
  const long n = a->inputs[0].shape[0];
  const float alpha = static_cast<float>(kiln_scalar(a, "alpha", 1.0));
  const float beta = static_cast<float>(kiln_scalar(a, "beta", 0.0));
  for (long i = 0; i < n; ++i) y[i] = alpha * x[i] + beta;
  return 0;
}
)";

constexpr const char* kKernel =
    R"(// Program 0. Kiln's proposers rewrite only the region between the markers; THREADS and UNROLL
// arrive as -D defines from task.yaml's params.
#include <kiln/kernel_abi.h>
#include <omp.h>

#ifndef THREADS
#define THREADS 1
#endif
#ifndef UNROLL
#define UNROLL 1
#endif

// [EVOLVE_START]
static void compute(const float* x, float* y, long n, float alpha, float beta) {
#pragma omp parallel for num_threads(THREADS) schedule(static)
  for (long i = 0; i < n; i += UNROLL) {
    for (long u = 0; u < UNROLL && i + u < n; ++u) y[i + u] = alpha * x[i + u] + beta;
  }
}
// [EVOLVE_END]

extern "C" int kiln_entry(const kiln_args* a) {
  compute(static_cast<const float*>(a->inputs[0].data), static_cast<float*>(a->outputs[0].data),
          a->inputs[0].shape[0], static_cast<float>(kiln_scalar(a, "alpha", 1.0)),
          static_cast<float>(kiln_scalar(a, "beta", 0.0)));
  return 0;
}
)";

constexpr const char* kInstructions = R"(# {{NAME}}

y = alpha * x + beta over a vector of N floats. Memory-bound: aim for full memory bandwidth.
)";

std::string fill(std::string text, const std::string& name) {
  return std::regex_replace(text, std::regex("\\{\\{NAME\\}\\}"), name);
}

}  // namespace

int cmd_task_new(const Common& c, const std::string& name, const std::string& parent_dir) {
  if (!std::regex_match(name, std::regex("[a-z0-9_]+"))) {
    std::fprintf(stderr, "kiln: task name '%s': expected [a-z0-9_]+\n", name.c_str());
    return 1;
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(parent_dir, ec)) {
    std::fprintf(stderr, "kiln: --dir %s: no such folder (kiln creates only the task's own)\n", parent_dir.c_str());
    return 1;
  }
  std::string dir = parent_dir + "/" + name;
  if (std::filesystem::exists(dir)) {
    std::fprintf(stderr, "kiln: %s already exists\n", dir.c_str());
    return 1;
  }
  if (auto st = make_dirs(dir); !st.is_ok()) {
    std::fprintf(stderr, "kiln: %s\n", st.message().c_str());
    return 1;
  }
  for (const auto& [file, text] : {std::pair{"task.yaml", kTaskYaml}, std::pair{"reference.cpp", kReference},
                                   std::pair{"kernel.cpp", kKernel}, std::pair{"instructions.md", kInstructions}}) {
    if (auto st = write_file_atomic(dir + "/" + file, fill(text, name)); !st.is_ok()) {
      std::fprintf(stderr, "kiln: %s\n", st.message().c_str());
      return 1;
    }
  }
  if (c.json) {
    std::printf("%s\n", nlohmann::json{{"created", dir}, {"name", name}}.dump(2).c_str());
    return 0;
  }
  std::printf(
      "created %s (task.yaml, reference.cpp, kernel.cpp, instructions.md); check it with: kiln task validate %s\n",
      dir.c_str(), dir.c_str());
  return 0;
}

}  // namespace kiln::cli
