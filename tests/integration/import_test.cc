// `kiln task import`: KernelBench-format problems the tests write become task packages that validate and
// evaluate, --set changes the benchmark case, and what cannot be imported is refused with one line naming
// the construct and the file's line.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

#include "kiln/core/files.h"
#include "kiln/testing/skip.h"
#include "kiln/testing/torch.h"
#include "process.h"

using namespace kiln;
using namespace kiln::testing;

namespace {

constexpr const char* kPython = kSystemPython;

#define REQUIRE_TORCH() \
  if (!have_torch()) KILN_SKIP("/usr/bin/python3 has no torch here")

ProcessResult kiln_cmd(std::vector<std::string> args) {
  std::vector<std::string> argv{bin_dir() + "/kiln"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, 300);
}

size_t lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

std::string write(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.path() + "/" + name;
  REQUIRE(write_file(path, text).is_ok());
  return path;
}

std::string read(const std::string& path) {
  auto text = read_file(path);
  REQUIRE(text.is_ok());
  return *text;
}

constexpr const char* kMatmul = R"PY(import torch
import torch.nn as nn

M = 256
K = 128
N = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
)PY";

const std::string kLinear = kiln::testing::linear_relu_module(64, 96, 48);

constexpr const char* kCrossEntropy = R"PY(import torch
import torch.nn as nn

batch_size = 512
num_classes = 100


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.nn.functional.cross_entropy(predictions, targets)


def get_inputs():
    return [torch.randn(batch_size, num_classes), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []
)PY";

constexpr const char* kLinearKernel = R"(#include <cstdint>
#include "kiln/kernel_abi.h"
// [EVOLVE_START]
// [EVOLVE_END]
extern "C" KILN_EXPORT int kiln_entry(const kiln_args* a) {
  const float* x = static_cast<const float*>(a->inputs[0].data);
  const float* w = static_cast<const float*>(a->inputs[1].data);
  const float* b = static_cast<const float*>(a->inputs[2].data);
  float* y = static_cast<float*>(a->outputs[0].data);
  const int64_t n = a->inputs[0].shape[0], k = a->inputs[0].shape[1], m = a->inputs[1].shape[0];
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      float s = b[j];
      for (int64_t p = 0; p < k; ++p) s += x[i * k + p] * w[j * k + p];
      y[i * m + j] = s > 0 ? s : 0;
    }
  return 0;
}
)";

constexpr const char* kCrossEntropyKernel = R"(#include <cmath>
#include <cstdint>
#include "kiln/kernel_abi.h"
// [EVOLVE_START]
// [EVOLVE_END]
extern "C" KILN_EXPORT int kiln_entry(const kiln_args* a) {
  const float* p = static_cast<const float*>(a->inputs[0].data);
  const int64_t* t = static_cast<const int64_t*>(a->inputs[1].data);
  const int64_t n = a->inputs[0].shape[0], c = a->inputs[0].shape[1];
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = p + i * c;
    float m = row[0];
    for (int64_t j = 1; j < c; ++j) m = row[j] > m ? row[j] : m;
    double s = 0;
    for (int64_t j = 0; j < c; ++j) s += std::exp(double(row[j] - m));
    total += std::log(s) + m - row[t[i]];
  }
  *static_cast<float*>(a->outputs[0].data) = float(total / double(n));
  return 0;
}
)";

// kiln-eval on the package with `source` as the candidate (correctness only): its exit code and stderr.
ProcessResult evaluate(const TempDir& dir, const std::string& package, const std::string& source) {
  const std::string cpp = write(dir, "candidate.cpp", source), so = dir.path() + "/candidate.so";
  const std::string cmd =
      "g++ -O2 -shared -fPIC -std=c++17 -I" + source_dir() + "/libs/core/include -o " + so + " " + cpp;
  REQUIRE(std::system(cmd.c_str()) == 0);
  return run_process({bin_dir() + "/kiln-eval", "--task", package, "--kernel", so, "--out", dir.path() + "/r.msgpack",
                      "--python", kPython, "--no-timing"},
                     300);
}

// Imports `problem` into dir/pkg and checks that `kiln task validate` accepts it; returns task.yaml.
std::string import_ok(const TempDir& dir, const std::string& problem, std::vector<std::string> extra = {}) {
  std::vector<std::string> args{"task", "import", problem, "-o", dir.path() + "/pkg"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = kiln_cmd(args);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto v = kiln_cmd({"task", "validate", dir.path() + "/pkg"});
  INFO(v.err);
  REQUIRE(v.exit_code == 0);
  return read(dir.path() + "/pkg/task.yaml");
}

}  // namespace

TEST_CASE("a KernelBench matmul imports with its constants as dims and an empty program 0", "[integration][import]") {
  REQUIRE_TORCH();
  TempDir dir("kiln-import");
  const std::string yaml = import_ok(dir, write(dir, "matmul.py", kMatmul));
  CHECK_THAT(yaml, Catch::Contains("{name: A, dtype: fp32, shape: [M, K], init: \"normal\"}"));
  CHECK_THAT(yaml, Catch::Contains("{name: B, dtype: fp32, shape: [K, N], init: \"normal\"}"));
  CHECK_THAT(yaml, Catch::Contains("{name: out, dtype: fp32, shape: [M, N]}"));
  CHECK_THAT(yaml, Catch::Contains("cases: [{M: 256, K: 128, N: 64}]"));
  CHECK_THAT(yaml, Catch::Contains("{M: 3, K: 4, N: 5}"));
  CHECK(read(dir.path() + "/pkg/reference.py") == kMatmul);
  const std::string kernel = read(dir.path() + "/pkg/kernel.cpp");
  CHECK_THAT(kernel, Catch::Contains("// [EVOLVE_START]\n// [EVOLVE_END]\n"));
  CHECK_THAT(kernel, Catch::Contains("inputs[1]  B: fp32 [K, N]"));
  CHECK_THAT(read(dir.path() + "/pkg/instructions.md"), Catch::Contains("only an LLM or an external agent"));
}

TEST_CASE("a Linear+ReLU's parameters become inputs after forward's, and the package evaluates",
          "[integration][import]") {
  REQUIRE_TORCH();
  TempDir dir("kiln-import");
  const std::string kernel = write(dir, "program0.cpp", kLinearKernel);
  const std::string yaml = import_ok(dir, write(dir, "linear_relu.py", kLinear), {"--kernel", kernel});
  CHECK_THAT(yaml, Catch::Contains("name: linear_relu\n"));
  CHECK_THAT(yaml, Catch::Contains("{name: x, dtype: fp32, shape: [batch_size, in_features], init: \"normal\"}"));
  // nn.Linear's kaiming-uniform weight: uniform(-b, b) with b about 1/sqrt(in_features) = 0.102.
  CHECK_THAT(yaml, Catch::Contains("{name: fc_weight, dtype: fp32, shape: [out_features, in_features], "
                                   "init: \"uniform(-0.10"));
  CHECK_THAT(yaml, Catch::Contains("param: fc.weight}"));
  CHECK_THAT(yaml, Catch::Contains("{name: fc_bias, dtype: fp32, shape: [out_features]"));
  CHECK(read(dir.path() + "/pkg/kernel.cpp") == kLinearKernel);
  auto r = evaluate(dir, dir.path() + "/pkg", kLinearKernel);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("ok: correct"));
  // Without the bias the module's drawn parameters catch it.
  std::string wrong = kLinearKernel;
  wrong.replace(wrong.find("float s = b[j];"), 15, "float s = 0.0f;");
  r = evaluate(dir, dir.path() + "/pkg", wrong);
  CHECK_THAT(r.err, Catch::Contains("mismatch"));
}

TEST_CASE("a cross-entropy keeps its int64 targets in range and evaluates", "[integration][import]") {
  REQUIRE_TORCH();
  TempDir dir("kiln-import");
  const std::string yaml = import_ok(dir, write(dir, "ce.py", kCrossEntropy));
  CHECK_THAT(yaml, Catch::Contains("{name: targets, dtype: int64, shape: [batch_size], init: \"int(0, 99)\"}"));
  CHECK_THAT(yaml, Catch::Contains("{name: out, dtype: fp32, shape: []}"));
  // num_classes bounds the targets: the correctness cases keep it and shrink the batch.
  CHECK_THAT(yaml, Catch::Contains("{batch_size: 3, num_classes: 100}"));
  auto r = evaluate(dir, dir.path() + "/pkg", kCrossEntropyKernel);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("ok: correct"));
}

TEST_CASE("the --set flag changes the problem's constants and so the benchmark case", "[integration][import]") {
  REQUIRE_TORCH();
  TempDir dir("kiln-import");
  const std::string problem = write(dir, "linear.py", kLinear);
  const std::string yaml = import_ok(dir, problem, {"--set", "batch_size=16", "--set", "out_features=8"});
  CHECK_THAT(yaml, Catch::Contains("benchmark:\n  cases: [{batch_size: 16, in_features: 96, out_features: 8}]"));
  for (const char* bad : {"no_such=4", "batch_size=0", "batch_size"}) {
    auto r = kiln_cmd({"task", "import", problem, "-o", dir.path() + "/other", "--set", bad});
    INFO(bad << ": " << r.err);
    CHECK(r.exit_code != 0);
    CHECK(lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains("--set"));
  }
}

TEST_CASE("what cannot be imported is refused with one line naming the construct and the file's line",
          "[integration][import]") {
  REQUIRE_TORCH();
  // A problem whose forward(x) body, __init__ body and get_inputs() return line are given; forward's
  // body starts at line 14, get_inputs() returns at line 18 (when forward's body is one line).
  auto problem = [](const std::string& forward, const std::string& init = "        pass",
                    const std::string& inputs = "torch.randn(batch_size, dim)") {
    return "import torch\nimport torch.nn as nn\n\nbatch_size = 16\ndim = 32\n\n\nclass Model(nn.Module):\n"
           "    def __init__(self):\n        super().__init__()\n" +
           init + "\n\n    def forward(self, x):\n" + forward + "\n\n\ndef get_inputs():\n    return [" + inputs +
           "]\n\n\ndef get_init_inputs():\n    return []\n";
  };
  struct Case {
    std::string name, source, expect;
  } cases[] = {
      {"tuple", problem("        return x, x"), "tuple.py:14: forward() returns a tuple"},
      {"list", problem("        return [x * 2]"), "list.py:14: forward() returns a list"},
      {"inplace", problem("        x.relu_()\n        return x"), "inplace.py:15: forward() returns its input x"},
      {"modifies", problem("        y = x * 2\n        x.add_(1)\n        return y"),
       "modifies.py:15: forward() modifies its input x in place"},
      {"dropout", problem("        y = x * 2\n        return self.drop(y)", "        self.drop = nn.Dropout(0.5)"),
       "dropout.py:15: forward() is random: two runs on the same inputs differ (dropout in training mode)"},
      {"masked", problem("        y = torch.relu(x)\n        return x[x > 0]"),
       "masked.py:15: the output's shape depends on the input values"},
      {"twice", problem("        return x * 2", "        pass", "torch.randn(batch_size, 2 * dim)"),
       "twice.py:18: input 0 of get_inputs() (x): dim 1 (64) follows dim but is not one of the module's constants"},
      {"no_model", std::regex_replace(problem("        return x"), std::regex("class Model"), "class Other"),
       "no_model.py: no class Model(nn.Module)"},
      {"no_inputs", std::regex_replace(problem("        return x"), std::regex("def get_inputs"), "def make_inputs"),
       "no_inputs.py: no get_inputs()"},
  };
  TempDir dir("kiln-import");
  for (const auto& c : cases) {
    const std::string out = dir.path() + "/" + c.name;
    auto r = kiln_cmd({"task", "import", write(dir, c.name + ".py", c.source), "-o", out});
    INFO(c.name << ": " << r.err);
    CHECK(r.exit_code != 0);
    CHECK(lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains("kiln: " + dir.path() + "/" + c.expect));
    CHECK_FALSE(std::filesystem::exists(out));
  }
}

TEST_CASE("an interpreter without torch, a kernel without a region and a used folder are one clear line each",
          "[integration][import]") {
  if (!std::filesystem::exists(kPython)) KILN_SKIP("no /usr/bin/python3 here");
  TempDir dir("kiln-import");
  const std::string problem = write(dir, "matmul.py", kMatmul);
  // -S: no site-packages, so no torch.
  const std::string bare = write(dir, "bare-python", "#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n");
  std::filesystem::permissions(bare, std::filesystem::perms::owner_all);
  auto r = kiln_cmd({"task", "import", problem, "-o", dir.path() + "/pkg", "--python", bare});
  CHECK(r.exit_code != 0);
  CHECK(lines(r.err) == 1);
  CHECK_THAT(r.err, Catch::Contains(bare + " has no torch") && Catch::Contains("--python"));
  r = kiln_cmd({"task", "import", problem, "-o", dir.path() + "/pkg", "--kernel", problem});
  CHECK(lines(r.err) == 1);
  CHECK_THAT(r.err, Catch::Contains("--kernel " + problem + ": no [EVOLVE_START]"));
  r = kiln_cmd({"task", "import", problem, "-o", dir.path(), "--backend", "cpu"});
  CHECK_THAT(r.err, Catch::Contains("already exists and is not an empty folder"));
  r = kiln_cmd({"task", "import", problem, "-o", dir.path() + "/pkg", "--backend", "tpu"});
  CHECK_THAT(r.err, Catch::Contains("--backend: expected cpu or cuda"));
}
