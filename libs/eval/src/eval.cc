#include "kiln/eval/eval.h"

#include <dlfcn.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "baselines.h"
#include "kiln/eval/detail/runner.h"
#include "kiln/eval/host.h"
#include "kiln/eval/stats.h"
#include "kiln/eval/detail/protocol.h"
#include "kiln/eval/detail/tensor.h"

namespace kiln::eval {
namespace {

using detail::call_failure;
using detail::conclude;
using detail::Findings;
using detail::format_ratio;
using detail::HostTensor;
using detail::kRecheckSeed;
using detail::kTimingSeed;
using detail::Runner;
using detail::Scalars;

using detail::allocate;
using detail::compare_outputs;
using detail::fill_inputs;
using detail::poison_outputs;
using detail::TensorSet;

// The kiln_args of one TensorSet. Descriptors are restored before every call, so a kernel that scribbles
// on them cannot affect the next one; whether it did is checked separately.
class Invoker {
 public:
  Invoker(TensorSet& set, const Scalars& scalars) {
    for (auto& t : set.inputs) inputs_.push_back(t.descriptor());
    for (auto& t : set.outputs) outputs_.push_back(t.descriptor());
    live_inputs_ = inputs_;
    live_outputs_ = outputs_;
    args_.inputs = live_inputs_.data();
    args_.n_inputs = static_cast<int32_t>(live_inputs_.size());
    args_.outputs = live_outputs_.data();
    args_.n_outputs = static_cast<int32_t>(live_outputs_.size());
    args_.scalar_names = scalars.names.data();
    args_.scalar_values = scalars.values.data();
    args_.n_scalars = static_cast<int32_t>(scalars.names.size());
    args_.stream = nullptr;
  }
  Invoker(const Invoker&) = delete;
  Invoker& operator=(const Invoker&) = delete;

  void prepare() {
    std::copy(inputs_.begin(), inputs_.end(), live_inputs_.begin());
    std::copy(outputs_.begin(), outputs_.end(), live_outputs_.begin());
  }
  kiln_args& args() { return args_; }
  Result<int> prepare_and_call(Runner& runner) {
    prepare();
    return runner.call(args_);
  }
  bool descriptors_intact() const {
    auto same = [](const std::vector<kiln_tensor>& a, const std::vector<kiln_tensor>& b) {
      return std::memcmp(a.data(), b.data(), a.size() * sizeof(kiln_tensor)) == 0;
    };
    return same(inputs_, live_inputs_) && same(outputs_, live_outputs_);
  }

 private:
  std::vector<kiln_tensor> inputs_, outputs_, live_inputs_, live_outputs_;
  kiln_args args_{};
};

// Checks one candidate call's side effects: descriptors and inputs untouched.
void check_side_effects(const task::TaskSpec& spec, const Invoker& invoker, const TensorSet& used,
                        const TensorSet& pristine, const std::string& context, Findings& f) {
  if (!invoker.descriptors_intact() && f.changed_descriptor.empty()) {
    f.changed_descriptor = "the kernel changed a tensor descriptor (" + context + ")";
  }
  detail::check_inputs(spec, used, pristine, context, f);
}

// A call of the candidate: false when it failed (a non-zero return, or its runner died: both recorded in
// `f`); an error only for trouble on the evaluator's side.
Result<bool> call_candidate(Runner& candidate, Invoker& invoker, const std::string& context, Findings& f) {
  auto rc = invoker.prepare_and_call(candidate);
  if (!rc.is_ok()) {
    if (!candidate.death()) return rc.status();
    f.crashed = candidate.death()->what + " (" + context + ")";
    return false;
  }
  if (*rc != 0) {
    f.failed_call = call_failure(*rc, context);
    return false;
  }
  return true;
}

Status call_reference(Runner& reference, Invoker& invoker, const std::string& context) {
  auto rc = invoker.prepare_and_call(reference);
  if (!rc.is_ok()) return internal_error("the reference failed: " + rc.status().message() + " (" + context + ")");
  if (*rc != 0) return internal_error("the reference's kiln_entry returned " + std::to_string(*rc) + " (" + context + ")");
  return Status::ok();
}

// DESIGN §5 correctness for one case and seed. An error only for a failing reference.
Status check_case(const task::TaskSpec& spec, Runner& candidate, Runner& reference, const Scalars& scalars,
                  const TensorSet& pristine, const std::string& context, Findings& f) {
  TensorSet cand = pristine;
  TensorSet ref = pristine;
  poison_outputs(cand, 0);
  poison_outputs(ref, 0);
  Invoker cand_call(cand, scalars), ref_call(ref, scalars);

  KILN_ASSIGN_OR_RETURN(bool ok, call_candidate(candidate, cand_call, context, f));
  if (!ok) return Status::ok();
  check_side_effects(spec, cand_call, cand, pristine, context, f);

  KILN_RETURN_IF_ERROR(call_reference(reference, ref_call, context));

  // The second call gets fresh copies of the inputs and poisoned outputs: a kernel that leans on what the
  // first call left behind fails here.
  TensorSet first_outputs{{}, cand.outputs};
  for (size_t i = 0; i < cand.inputs.size(); ++i) cand.inputs[i].copy_from(pristine.inputs[i]);
  poison_outputs(cand, 1);
  KILN_ASSIGN_OR_RETURN(ok, call_candidate(candidate, cand_call, context + ", second call", f));
  if (!ok) return Status::ok();
  check_side_effects(spec, cand_call, cand, pristine, context + ", second call", f);

  compare_outputs(spec, first_outputs, ref, context, f);
  compare_outputs(spec, cand, ref, context + ", second call", f);
  return Status::ok();
}

// Cold mode: no tensor of the call is in any cache when it starts. The lines stage() wrote into the
// runner's arena are evicted one by one (clflush, dc civac): every cache level of every core, about 1 ms
// for 3 MiB. Where the CPU cannot, a buffer 1.5 times the last-level cache is written and read instead,
// which evicts only what the evaluator's core shares and costs a pass over that buffer per call; it is not
// inherited by the runners forked for each timing generation (MADV_DONTFORK): shared copy-on-write, every
// page of it would fault again on the next flush after every fork.
class CacheFlusher {
 public:
  CacheFlusher() = default;
  ~CacheFlusher() {
    if (lines_) ::munmap(lines_, count_ * sizeof(uint64_t));
  }
  CacheFlusher(const CacheFlusher&) = delete;
  CacheFlusher& operator=(const CacheFlusher&) = delete;
  void before_call(const Runner& runner) {
    if (runner.evict_staged()) return;
    if (!lines_) allocate();
    ++round_;
    for (size_t i = 0; i < count_; ++i) lines_[i] = round_ + i;
    uint64_t sum = 0;
    for (size_t i = 0; i < count_; i += 8) sum += lines_[i];
    sink_ = sum;
  }

 private:
  void allocate() {
    count_ = last_level_cache_bytes() * 3 / 2 / sizeof(uint64_t);
    void* p = ::mmap(nullptr, count_ * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    ::madvise(p, count_ * sizeof(uint64_t), MADV_DONTFORK);
    ::madvise(p, count_ * sizeof(uint64_t), MADV_HUGEPAGE);  // fewer first-touch faults; advice only
    lines_ = static_cast<uint64_t*>(p);
  }
  size_t count_ = 0;
  uint64_t* lines_ = nullptr;
  uint64_t round_ = 0;
  volatile uint64_t sink_ = 0;
};

// One contestant of the timing loop: its runner, its own tensors and its samples.
struct Contestant {
  std::string name;
  Runner* runner = nullptr;
  TensorSet tensors;
  std::unique_ptr<Invoker> invoker;
  std::vector<double> samples_us;
  RunningStats running;
};

using Clock = std::chrono::steady_clock;

// Timing runs in generations: the first uses the runners that ran correctness, each later one fresh
// runner processes (warmed up again), and in each the contestants' tensors sit at other pages and cache
// sets. The speedup interval resamples whole generations, so an offset fixed for a process or a placement
// shows up as spread instead of as a confident bias. A generation lasts at least kMinGenerationRounds
// rounds and min_time_s / kGenerations seconds.
constexpr int64_t kMinGenerationRounds = 2;
constexpr double kGenerations = 10;

double elapsed_s(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

struct TimingOutcome {
  proto::CaseTiming timing;
  bool candidate_failed = false;  // it returned non-zero or died while being timed (recorded in Findings)
};

using RunnerFactory = std::function<Result<std::vector<std::unique_ptr<Runner>>>()>;

Result<TimingOutcome> time_case(const task::TaskSpec& spec, std::vector<std::unique_ptr<Runner>>& runners,
                                const RunnerFactory& fresh_runners, const Scalars& scalars, const task::Dims& dims,
                                const TimingOptions& opt, const EvalOptions& eval_options, CacheFlusher* flusher,
                                TensorSet& cand_tensors, Findings& f) {
  const std::string shape = task::dims_string(dims);
  std::vector<Contestant> all;
  // Index 0 is the candidate, 1 the reference, the rest baselines (runners in the same order); each gets
  // its own copy of the inputs.
  for (size_t i = 0; i < runners.size(); ++i) {
    Contestant c{runners[i]->name(), runners[i].get(), cand_tensors, nullptr, {}, {}};
    if (i >= 2) {
      const detail::Baseline* b = detail::find_baseline(c.name);
      if (!b) return invalid_argument("unknown baseline '" + c.name + "'");
      KILN_RETURN_IF_ERROR(b->check(c.tensors.inputs, c.tensors.outputs).with_context("case " + shape));
    }
    all.push_back(std::move(c));
  }
  for (auto& c : all) {
    poison_outputs(c.tensors, 0);
    c.invoker = std::make_unique<Invoker>(c.tensors, scalars);
  }

  TimingOutcome out;
  // One call: the tensors go to the runner's arena, the cache is flushed (cold mode, timed calls only: a
  // warm-up pages in code and arenas, its time is thrown away), the runner is continued, and the clock
  // covers the call (Runner says exactly what). False when the candidate failed (recorded).
  auto run_one = [&](Contestant& c, double* us, const std::string& context, bool timed) -> Result<bool> {
    c.invoker->prepare();
    KILN_RETURN_IF_ERROR(c.runner->stage(c.invoker->args()));
    if (flusher && timed) flusher->before_call(*c.runner);
    Result<int> rc = c.runner->invoke(us);
    if (rc.is_ok()) {
      if (Status st = c.runner->freeze(); !st.is_ok()) rc = st;
    }
    if (!rc.is_ok()) {
      if (&c != &all[0] || !c.runner->death()) {
        return internal_error(c.name + " failed: " + rc.status().message() + " (" + context + ")");
      }
      f.crashed = c.runner->death()->what + " (" + context + ")";
      return false;
    }
    c.runner->unstage(c.invoker->args());
    // A thread the kernel left working after it returned ran on until the runner stopped: that CPU time
    // is the call's too.
    *us += c.runner->after_return_cpu_us();
    if (*rc == 0) return true;
    if (&c != &all[0]) {
      return internal_error("the " + c.name + "'s kiln_entry returned " + std::to_string(*rc) + " (" + context + ")");
    }
    f.failed_call = call_failure(*rc, context);
    return false;
  };
  auto warm_up = [&]() -> Result<bool> {
    for (int64_t w = 0; w < opt.warmup_iters; ++w) {
      for (auto& c : all) {
        double us = 0;
        KILN_ASSIGN_OR_RETURN(bool ok, run_one(c, &us, shape + ", warm-up", false));
        if (!ok) return false;
      }
    }
    return true;
  };
  KILN_ASSIGN_OR_RETURN(bool warmed, warm_up());
  if (!warmed) {
    out.candidate_failed = true;
    return out;
  }

  std::vector<std::unique_ptr<Runner>> generation;  // the runners of the current generation after the first
  std::vector<size_t> block_starts;
  auto begin_generation = [&](int64_t round) -> Result<bool> {
    const uint64_t g = block_starts.size();
    block_starts.push_back(static_cast<size_t>(round));
    if (g > 0) {
      KILN_ASSIGN_OR_RETURN(generation, fresh_runners());
      for (size_t i = 0; i < all.size(); ++i) {
        if (const auto* d = generation[i]->death()) {
          if (i != 0) return internal_error("the " + generation[i]->name() + " runner: " + d->what);
          f.crashed = d->what + " (" + shape + ", timing generation " + std::to_string(g) + ")";
          return false;
        }
        all[i].runner = generation[i].get();
      }
    }
    for (size_t i = 0; i < all.size(); ++i) {
      const uint64_t draw = detail::mix_seed(detail::mix_seed(kTimingSeed + 3, g), i);
      all[i].runner->set_placement(draw % (detail::kPlacementSlack / 64) * 64);
    }
    if (g > 0) return warm_up();
    return true;
  };

  // The inputs change a little before every round (a block copied in from a second input set), the same
  // for every contestant, and the timed outputs of the candidate are compared with the reference's of the
  // same round at rounds it cannot predict and after the last one. A kernel that serves results from a
  // cache keyed on the input address and a few sampled values can then not be both fast and right.
  TensorSet donor = all[0].tensors;
  fill_inputs(spec, donor, kTimingSeed + 1);
  auto perturb = [&](uint64_t round) {
    for (size_t i = 0; i < donor.inputs.size(); ++i) {
      const size_t n = donor.inputs[i].elements();
      if (n == 0) continue;
      const size_t elem = donor.inputs[i].bytes() / n;
      const detail::PerturbBlock block = detail::perturb_block(n, round, i);
      const auto* from = static_cast<const char*>(donor.inputs[i].data()) + block.source * elem;
      for (auto& c : all)
        std::memcpy(static_cast<char*>(c.tensors.inputs[i].data()) + block.first * elem, from, block.len * elem);
    }
  };
  auto compare_round = [&](int64_t round) {
    compare_outputs(spec, all[0].tensors, all[1].tensors, shape + ", timed round " + std::to_string(round), f);
  };

  detail::StoppingRule rule(opt);
  const auto start = Clock::now();
  std::string stop_reason;
  const double generation_s = opt.min_time_s / kGenerations;
  double next_generation_s = 0;
  int64_t generation_rounds = 0;
  for (int64_t n = 0; stop_reason.empty(); ++n, ++generation_rounds) {
    if (n == 0 || (generation_rounds >= kMinGenerationRounds && elapsed_s(start) >= next_generation_s)) {
      KILN_ASSIGN_OR_RETURN(bool ok, begin_generation(n));
      if (!ok) {
        out.candidate_failed = true;
        return out;
      }
      next_generation_s = elapsed_s(start) + generation_s;
      generation_rounds = 0;
    }
    perturb(static_cast<uint64_t>(n));
    // Alternate the order inside each pair so neither side always runs right after the other.
    for (size_t k = 0; k < all.size(); ++k) {
      Contestant& c = all[n % 2 == 0 ? all.size() - 1 - k : k];
      double us = 0;
      KILN_ASSIGN_OR_RETURN(bool ok, run_one(c, &us, shape + ", timing", true));
      if (!ok) {
        out.candidate_failed = true;
        return out;
      }
      c.samples_us.push_back(us);
      c.running.add(us);
    }
    stop_reason = rule.after_round(n + 1, elapsed_s(start), std::max(all[0].running.cv(), all[1].running.cv()));
    if (!stop_reason.empty() || detail::compare_after_round(static_cast<uint64_t>(n))) compare_round(n);
  }

  std::vector<detail::NamedSamples> baselines;
  for (size_t i = 2; i < all.size(); ++i) baselines.push_back({all[i].name, all[i].samples_us});
  out.timing = detail::summarize_case(dims, all[0].samples_us, all[1].samples_us, baselines,
                                      eval_options.bootstrap_seed, opt.warmup_iters, stop_reason, block_starts);
  for (auto& r : runners) r->set_placement(0);
  cand_tensors = std::move(all[0].tensors);
  return out;
}

// After timing, the same buffers get new values: a kernel that caches results by pointer fails here.
Status recheck_after_timing(const task::TaskSpec& spec, Runner& candidate, Runner& reference,
                            const Scalars& scalars, const std::string& shape, TensorSet& cand, Findings& f) {
  fill_inputs(spec, cand, kRecheckSeed);
  TensorSet pristine = cand;
  TensorSet ref = cand;
  poison_outputs(ref, 0);
  poison_outputs(cand, 1);
  Invoker ref_call(ref, scalars), cand_call(cand, scalars);
  const std::string context = shape + ", after timing";
  KILN_RETURN_IF_ERROR(call_reference(reference, ref_call, context));
  KILN_ASSIGN_OR_RETURN(bool ok, call_candidate(candidate, cand_call, context, f));
  if (!ok) return Status::ok();
  check_side_effects(spec, cand_call, cand, pristine, context, f);
  compare_outputs(spec, cand, ref, context, f);
  return Status::ok();
}

Result<proto::TestReport> evaluate_unguarded(const task::TaskSpec& spec, const Candidate& candidate,
                                             KernelEntry reference, const EvalOptions& options) {
  if ((!candidate.entry && candidate.library.empty()) || !reference)
    return invalid_argument("evaluate: missing kernel entry point");
  if (spec.backend != "cpu") return invalid_argument("this evaluator runs the cpu backend, the task is " + spec.backend);
  if (options.profile_run) return invalid_argument("profiling runs are for the cuda backend");
  for (const auto& b : spec.baselines) {
    if (!detail::find_baseline(b)) {
      return invalid_argument("unknown baseline '" + b + "' (known: " + detail::known_baselines() + ")");
    }
  }
  if (options.timing.mode != "cold" && options.timing.mode != "warm") {
    return invalid_argument("timing mode must be cold or warm, got '" + options.timing.mode + "'");
  }
  const Scalars scalars(spec);
  proto::TestReport report;
  report.correctness.rtol = spec.rtol;
  report.correctness.atol = spec.atol;
  report.performance.method = "host_clock";
  report.performance.mode = options.timing.mode;

  // Every contestant in its own runner process, started before anything runs here.
  std::vector<detail::RunnerKernel> kernels = {{"candidate", candidate.entry, candidate.library, nullptr},
                                               {"reference", reference, "", nullptr}};
  for (const auto& b : spec.baselines) kernels.push_back({b, nullptr, "", detail::find_baseline(b)});
  KILN_ASSIGN_OR_RETURN(size_t arena, detail::arena_bytes_for(spec));
  const RunnerFactory start_runners = [&] { return Runner::start(kernels, arena, options.wipe_in_runners); };
  KILN_ASSIGN_OR_RETURN(auto runners, start_runners());
  if (const auto* d = runners[0]->death(); d && d->load_failed) {
    report.status = proto::test_status::kLoadFailed;
    report.message = "cannot load the kernel: " + d->what;
    return report;
  }
  // Any other death before a call is the runner's own set-up (confinement, a device), not the kernel's.
  for (size_t i = 0; i < runners.size(); ++i) {
    if (const auto* d = runners[i]->death()) return internal_error("the " + runners[i]->name() + " runner: " + d->what);
  }
  Runner& cand_runner = *runners[0];
  Runner& ref_runner = *runners[1];

  Findings f;
  auto failed = [&] { return !f.failed_call.empty() || !f.crashed.empty(); };
  for (const auto& dims : spec.correctness_cases) {
    const std::string shape = task::dims_string(dims);
    KILN_ASSIGN_OR_RETURN(TensorSet pristine, allocate(spec, dims));
    f.tested(shape);
    for (int64_t seed = 0; seed < spec.seeds && !failed(); ++seed) {
      fill_inputs(spec, pristine, static_cast<uint64_t>(seed));
      KILN_RETURN_IF_ERROR(check_case(spec, cand_runner, ref_runner, scalars, pristine,
                                      shape + " seed " + std::to_string(seed), f));
    }
    if (failed()) break;
  }
  conclude(f, report);
  if (!report.correctness.passed || !options.measure) return report;

  std::optional<CacheFlusher> flusher;
  if (options.timing.mode == "cold") flusher.emplace();
  std::string speedups;
  for (const auto& dims : spec.benchmark_cases) {
    const std::string shape = task::dims_string(dims);
    KILN_ASSIGN_OR_RETURN(TensorSet cand, allocate(spec, dims));
    fill_inputs(spec, cand, kTimingSeed);
    KILN_ASSIGN_OR_RETURN(TimingOutcome timed, time_case(spec, runners, start_runners, scalars, dims, options.timing,
                                                         options, flusher ? &*flusher : nullptr, cand, f));
    if (timed.candidate_failed) break;
    KILN_RETURN_IF_ERROR(recheck_after_timing(spec, cand_runner, ref_runner, scalars, shape, cand, f));
    if (failed()) break;
    f.tested(shape);
    speedups += "; speedup " + format_ratio(timed.timing.speedup) + " [" + format_ratio(timed.timing.speedup_lo) +
                ", " + format_ratio(timed.timing.speedup_hi) + "] on " + shape;
    report.performance.cases.push_back(std::move(timed.timing));
  }
  report.performance.measured = report.performance.cases.size() == spec.benchmark_cases.size();
  conclude(f, report);
  if (report.correctness.passed) report.message += speedups;
  return report;
}

}  // namespace

Result<KernelLibrary> KernelLibrary::open(const std::string& path) {
  // dlopen searches the library path for a bare name; a kernel is always a file we were given.
  const std::string file = path.find('/') == std::string::npos ? "./" + path : path;
  dlerror();
  // RTLD_NODELETE: a kernel may leave OpenMP worker threads behind that must not outlive its code.
  void* handle = dlopen(file.c_str(), RTLD_LOCAL | RTLD_NOW | RTLD_NODELETE);
  if (!handle) {
    const char* err = dlerror();
    return invalid_argument("dlopen " + path + ": " + (err ? err : "unknown error"));
  }
  void* sym = dlsym(handle, "kiln_entry");
  if (!sym) {
    dlclose(handle);
    return invalid_argument(path + ": no kiln_entry symbol (is it declared extern \"C\"?)");
  }
  return KernelLibrary(handle, reinterpret_cast<KernelEntry>(sym));
}

KernelLibrary::~KernelLibrary() {
  if (handle_) dlclose(handle_);
}

KernelLibrary::KernelLibrary(KernelLibrary&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), entry_(std::exchange(other.entry_, nullptr)) {}

KernelLibrary& KernelLibrary::operator=(KernelLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_) dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    entry_ = std::exchange(other.entry_, nullptr);
  }
  return *this;
}

bool is_known_baseline(const std::string& name) { return detail::find_baseline(name) != nullptr; }

Result<proto::TestReport> evaluate(const task::TaskSpec& spec, KernelEntry candidate, KernelEntry reference,
                                   const EvalOptions& options) {
  return evaluate(spec, Candidate{"", candidate}, reference, options);
}

Result<proto::TestReport> evaluate(const task::TaskSpec& spec, const Candidate& candidate, KernelEntry reference,
                                   const EvalOptions& options) {
  try {
    return evaluate_unguarded(spec, candidate, reference, options);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("evaluate: out of memory allocating the task's tensors");
  } catch (const std::exception& e) {
    return internal_error(std::string("evaluate: ") + e.what());
  }
}

}  // namespace kiln::eval
