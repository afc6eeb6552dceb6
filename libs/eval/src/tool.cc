#include "kiln/eval/tool.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "kiln/core/files.h"
#include "kiln/core/hash.h"
#include "kiln/core/time.h"
#include "kiln/eval/torch_module.h"
#include "kiln/proto/codec.h"

namespace kiln::eval {

namespace {

constexpr int kExitUsage = 2;
constexpr int kExitNoReport = 3;

struct Args {
  std::string task_dir, kernel, reference, out, report_key;
  bool no_torch_baselines = false;
  EvalOptions eval;
};

void print_usage(const char* name) {
  std::fprintf(stderr,
               "usage: %s --task DIR --kernel K.so [--reference R.so] --out RESULT.msgpack [--report-key FILE]\n"
               "       [--python INTERPRETER]   (a Python with torch, for a task with a PyTorch module)\n"
               "       [--no-torch-baselines]   (leave out the task's torch_eager and torch_compile baselines)\n"
               "       [--mode cold|warm] [--min-samples N] [--min-time S] [--max-time S]\n"
               "       [--max-noise X] [--warmup N] [--screen-below SPEEDUP] [--precision P] [--settle-calls N]\n"
               "       [--device-lock FILE]\n"
               "       [--no-timing] [--profile]\n",
               name);
}

Result<Args> parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--no-timing") {
      a.eval.measure = false;
      continue;
    }
    if (flag == "--no-torch-baselines") {
      a.no_torch_baselines = true;
      continue;
    }
    if (flag == "--profile") {
      a.eval.profile_run = true;
      continue;
    }
    if (flag == "--help" || flag == "-h") return invalid_argument("");
    if (i + 1 >= argc) return invalid_argument(flag + ": missing value");
    const std::string value = argv[++i];
    char* end = nullptr;
    const double x = std::strtod(value.c_str(), &end);
    const bool numeric = !value.empty() && end && *end == '\0' && x >= 0;
    auto number = [&](double& target) -> Status {
      if (!numeric) return invalid_argument(flag + ": expected a number, got " + value);
      target = x;
      return Status::ok();
    };
    auto integer = [&](int64_t& target) -> Status {
      if (!numeric) return invalid_argument(flag + ": expected a number, got " + value);
      target = static_cast<int64_t>(x);
      return Status::ok();
    };
    auto& t = a.eval.timing;
    if (flag == "--task")
      a.task_dir = value;
    else if (flag == "--kernel")
      a.kernel = value;
    else if (flag == "--reference")
      a.reference = value;
    else if (flag == "--out")
      a.out = value;
    else if (flag == "--report-key")
      a.report_key = value;
    else if (flag == "--python")
      a.eval.python = value;
    else if (flag == "--device-lock")
      a.eval.device_lock = value;
    else if (flag == "--mode")
      t.mode = value;
    else if (flag == "--min-samples")
      KILN_RETURN_IF_ERROR(integer(t.min_samples));
    else if (flag == "--min-time")
      KILN_RETURN_IF_ERROR(number(t.min_time_s));
    else if (flag == "--max-time")
      KILN_RETURN_IF_ERROR(number(t.max_time_s));
    else if (flag == "--max-noise")
      KILN_RETURN_IF_ERROR(number(t.max_noise));
    else if (flag == "--warmup")
      KILN_RETURN_IF_ERROR(integer(t.warmup_iters));
    else if (flag == "--screen-below")
      KILN_RETURN_IF_ERROR(number(t.screen_below));
    else if (flag == "--precision")
      KILN_RETURN_IF_ERROR(number(t.precision));
    else if (flag == "--settle-calls")
      KILN_RETURN_IF_ERROR(integer(t.settle_calls));
    else
      return invalid_argument("unknown flag " + flag);
  }
  if (a.task_dir.empty() || a.kernel.empty() || a.out.empty())
    return invalid_argument("--task, --kernel and --out are required");
  if (!(a.eval.timing.precision >= 0 && a.eval.timing.precision < 1))
    return invalid_argument("--precision: expected 0 <= P < 1 (0: off), got " +
                            std::to_string(a.eval.timing.precision));
  if (a.eval.timing.mode != "cold" && a.eval.timing.mode != "warm")
    return invalid_argument("--mode: expected cold or warm, got " + a.eval.timing.mode);
  return a;
}

// Loads everything and evaluates. A setup that fails is never the candidate's doing (the candidate is
// loaded only in its runner, by evaluate(), which reports load_failed itself): the task, the reference, or
// evaluate() finding the task cannot be evaluated here. The report says evaluator_error, and the tester
// gives the job back rather than scoring it.
proto::TestReport run(Args& args, const EvalTool& tool) {
  proto::TestReport report;
  auto fail = [&](const std::string& message) {
    report.status = proto::TestStatus::kEvaluatorError;
    report.message = message;
    return report;
  };
  auto files = task::load_package(args.task_dir);
  if (!files.is_ok()) return fail("task: " + files.status().message());
  auto spec = task::parse_task(*files);
  if (!spec.is_ok()) return fail("task: " + spec.status().message());
  Candidate reference{args.reference, nullptr};
  std::optional<KernelLibrary> reference_lib;
  if (args.no_torch_baselines) {
    auto& b = spec->baselines;
    b.erase(std::remove_if(b.begin(), b.end(), is_torch_baseline), b.end());
  }
  if (!spec->torch_reference() && args.reference.empty())
    return fail("the task's reference is " + spec->reference_file + ": --reference is required");
  if (tool.load_reference_here && !spec->torch_reference()) {
    auto lib = KernelLibrary::open(args.reference);
    if (!lib.is_ok()) return fail("cannot load the reference: " + lib.status().message());
    reference_lib.emplace(std::move(lib).value());
    reference = Candidate{"", reference_lib->entry()};
  }
  const Candidate candidate{args.kernel, nullptr};
  std::fprintf(stderr, "%s: task '%s', %zu correctness cases x %lld seeds, %zu benchmark cases\n", tool.name,
               spec->name.c_str(), spec->correctness_cases.size(), static_cast<long long>(spec->seeds),
               spec->benchmark_cases.size());
  auto evaluated = tool.evaluate(*spec, candidate, reference, args.eval);
  if (!evaluated.is_ok()) return fail("evaluation: " + evaluated.status().message());
  return std::move(evaluated).value();
}

}  // namespace

bool report_authentic(std::string_view key, std::string_view report, std::string_view mac_hex) {
  return !key.empty() && constant_time_equal(hmac_sha256_hex(key, report), mac_hex);
}

int run_eval_tool(int argc, char** argv, const EvalTool& tool) {
  auto args = parse_args(argc, argv);
  if (!args.is_ok()) {
    if (!args.status().message().empty()) std::fprintf(stderr, "%s: %s\n", tool.name, args.status().message().c_str());
    print_usage(tool.name);
    return kExitUsage;
  }
  // No other process of this user may read or write this one's memory (/proc/<pid>/mem, environ): the
  // report key and the verdict live here.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  std::string key;
  if (!args->report_key.empty()) {
    auto k = read_file(args->report_key);
    if (!k.is_ok() || k->empty()) {
      std::fprintf(stderr, "%s: --report-key: cannot read %s\n", tool.name, args->report_key.c_str());
      return kExitUsage;
    }
    key = std::move(k).value();
    ::unlink(args->report_key.c_str());
    args->eval.wipe_in_runners.emplace_back(key.data(), key.size());
  }
  const double start = monotonic_s();
  proto::TestReport report = run(*args, tool);
  report.worker = tool.worker_info();
  report.duration_s = monotonic_s() - start;
  std::fprintf(stderr, "%s: %s: %s\n", tool.name, std::string(proto::word_of(report.status)).c_str(),
               report.message.c_str());
  const std::string bytes = proto::encode(report);
  Status written = write_file_atomic(args->out, bytes);
  if (written.is_ok() && !key.empty())
    written = write_file_atomic(report_mac_path(args->out), hmac_sha256_hex(key, bytes));
  explicit_bzero(key.data(), key.size());
  if (!written.is_ok()) {
    std::fprintf(stderr, "%s: writing %s: %s\n", tool.name, args->out.c_str(), written.message().c_str());
    return kExitNoReport;
  }
  return 0;
}

}  // namespace kiln::eval
