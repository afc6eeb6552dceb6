// kiln-bench-host: the evaluator's host-side work on the tensors of one large benchmark case, the part of
// an evaluation that neither the candidate nor the device does: inputs drawn from their seed, outputs
// poisoned, whole sets copied, and timed outputs compared with the reference's. On a GPU host these run
// around every timed case (the inputs three times: timing, donor, the check after timing), so for the
// bundled 8192x8192 and 2^27-element cases they are seconds of each test job. JSON on stdout.
//   kiln-bench-host [--elements N] [--repeat R] [--out FILE]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/eval/tensor.h"

using kiln::eval::HostTensor;
using nlohmann::json;

namespace {

template <class F>
double best_of(int repeat, F&& f) {
  double best = 1e300;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t elements = int64_t{8192} * 8192;
  int repeat = 3;
  std::string out;
  CLI::App app{"The evaluator's host-side tensor work on one large case"};
  app.add_option("--elements", elements, "elements of the fp32 tensor (default 8192 x 8192)");
  app.add_option("--repeat", repeat, "best of this many runs");
  app.add_option("--out", out, "also write the JSON here");
  CLI11_PARSE(app, argc, argv);

  HostTensor a(kiln::task::DType::kF32, {elements});
  HostTensor b(kiln::task::DType::kF32, {elements});
  json r = {{"elements", elements}, {"dtype", "fp32"}, {"repeat", repeat}, {"threads", kiln::eval::fill_threads()}};
  r["fill_normal_s"] = best_of(repeat, [&] { a.fill(kiln::task::InitKind::kNormal, 0, 1, 7); });
  r["fill_uniform_s"] = best_of(repeat, [&] { b.fill(kiln::task::InitKind::kUniform, -1, 1, 8); });
  r["poison_s"] = best_of(repeat, [&] { b.poison(0); });
  r["copy_s"] = best_of(repeat, [&] { b.copy_from(a); });
  kiln::eval::Comparison cmp;
  r["compare_s"] = best_of(repeat, [&] {
    cmp = {};
    kiln::eval::compare(b, a, 1e-5, 1e-5, "y", "bench", 5, cmp);
  });
  r["compare_mismatches"] = cmp.mismatches;
  const std::string text = r.dump(2);
  std::printf("%s\n", text.c_str());
  if (!out.empty()) std::ofstream(out) << text << "\n";
  return 0;
}
