// kiln-eval-cuda: the evaluation child for CUDA tasks (DESIGN §5), the twin of kiln-eval. The tester runs
// it in a sandbox with CUDA_VISIBLE_DEVICES naming one GPU. It loads the task and both shared objects, runs
// kiln::cuda::evaluate and writes the msgpack TestReport to --out; whenever a report is written the exit
// code is 0. A GPU fault becomes a report ("crashed"), a hang is ended by the tester's timeout.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kiln/core/files.h"
#include "kiln/core/time.h"
#include "kiln/cuda/eval.h"
#include "kiln/proto/codec.h"
#include "kiln/task/task.h"

namespace {

constexpr int kExitUsage = 2;
constexpr int kExitNoReport = 3;

constexpr const char* kUsage =
    "usage: kiln-eval-cuda --task DIR --kernel K.so --reference R.so --out RESULT.msgpack\n"
    "                      [--mode cold|warm] [--min-samples N] [--min-time S] [--max-time S]\n"
    "                      [--max-noise X] [--warmup N] [--no-timing]\n";

struct Args {
  std::string task_dir, kernel, reference, out;
  kiln::eval::EvalOptions eval;
};

kiln::Result<Args> parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--no-timing") {
      a.eval.measure = false;
      continue;
    }
    if (flag == "--help" || flag == "-h") return kiln::invalid_argument("");
    if (i + 1 >= argc) return kiln::invalid_argument(flag + ": missing value");
    const std::string value = argv[++i];
    char* end = nullptr;
    const double x = std::strtod(value.c_str(), &end);
    const bool numeric = !value.empty() && end && *end == '\0' && x >= 0;
    auto& t = a.eval.timing;
    auto number = [&](double& target) -> kiln::Status {
      if (!numeric) return kiln::invalid_argument(flag + ": expected a number, got " + value);
      target = x;
      return kiln::Status::ok();
    };
    auto integer = [&](int64_t& target) -> kiln::Status {
      if (!numeric) return kiln::invalid_argument(flag + ": expected a number, got " + value);
      target = static_cast<int64_t>(x);
      return kiln::Status::ok();
    };
    if (flag == "--task") a.task_dir = value;
    else if (flag == "--kernel") a.kernel = value;
    else if (flag == "--reference") a.reference = value;
    else if (flag == "--out") a.out = value;
    else if (flag == "--mode") t.mode = value;
    else if (flag == "--min-samples") KILN_RETURN_IF_ERROR(integer(t.min_samples));
    else if (flag == "--min-time") KILN_RETURN_IF_ERROR(number(t.min_time_s));
    else if (flag == "--max-time") KILN_RETURN_IF_ERROR(number(t.max_time_s));
    else if (flag == "--max-noise") KILN_RETURN_IF_ERROR(number(t.max_noise));
    else if (flag == "--warmup") KILN_RETURN_IF_ERROR(integer(t.warmup_iters));
    else return kiln::invalid_argument("unknown flag " + flag);
  }
  if (a.task_dir.empty() || a.kernel.empty() || a.reference.empty() || a.out.empty()) {
    return kiln::invalid_argument("--task, --kernel, --reference and --out are required");
  }
  return a;
}

kiln::proto::TestReport run(const Args& args) {
  kiln::proto::TestReport report;
  auto fail = [&](const std::string& message) {
    report.status = kiln::proto::test_status::kLoadFailed;
    report.message = message;
    return report;
  };
  auto files = kiln::task::load_package(args.task_dir);
  if (!files.is_ok()) return fail("task: " + files.status().message());
  auto spec = kiln::task::parse_task(*files);
  if (!spec.is_ok()) return fail("task: " + spec.status().message());
  auto reference = kiln::eval::KernelLibrary::open(args.reference);
  if (!reference.is_ok()) return fail("cannot load the reference: " + reference.status().message());
  auto kernel = kiln::eval::KernelLibrary::open(args.kernel);
  if (!kernel.is_ok()) return fail("cannot load the kernel: " + kernel.status().message());
  std::fprintf(stderr, "kiln-eval-cuda: task '%s', %zu correctness cases x %lld seeds, %zu benchmark cases\n",
               spec->name.c_str(), spec->correctness_cases.size(), static_cast<long long>(spec->seeds),
               spec->benchmark_cases.size());
  auto evaluated = kiln::cuda::evaluate(*spec, kernel->entry(), reference->entry(), args.eval);
  if (!evaluated.is_ok()) return fail("evaluation: " + evaluated.status().message());
  return std::move(evaluated).value();
}

}  // namespace

int main(int argc, char** argv) {
  auto args = parse_args(argc, argv);
  if (!args.is_ok()) {
    if (!args.status().message().empty()) std::fprintf(stderr, "kiln-eval-cuda: %s\n", args.status().message().c_str());
    std::fputs(kUsage, stderr);
    return kExitUsage;
  }
  const double start = kiln::monotonic_s();
  kiln::proto::TestReport report = run(*args);
  report.worker = kiln::cuda::cuda_worker_info();
  report.duration_s = kiln::monotonic_s() - start;
  std::fprintf(stderr, "kiln-eval-cuda: %s: %s\n", report.status.c_str(), report.message.c_str());
  kiln::Status written = kiln::write_file_atomic(args->out, kiln::proto::encode(report));
  if (!written.is_ok()) {
    std::fprintf(stderr, "kiln-eval-cuda: writing %s: %s\n", args->out.c_str(), written.message().c_str());
    return kExitNoReport;
  }
  return 0;
}
