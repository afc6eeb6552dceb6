#include "cuda_device.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "compare.h"
#include "contestant.h"
#include "draw.h"
#include "gpu_context.h"
#include "kiln/cuda/eval.h"
#include "kiln/cuda/runtime.h"
#include "kiln/eval/stats.h"
#include "runner_device.h"

namespace kiln::cuda {
namespace {

using detail::Contestant;
using detail::kPlacementSlack;
using detail::kTensorAlignment;
using detail::Layout;
using detail::open_gpu;
using detail::Placement;
using detail::round_up;
using eval::HostTensor;
using eval::Runner;
using eval::TensorSet;

// Calls of the overhead probe whose median is the fixed cost every call pays (waking a stopped process,
// one tiny launch in the runner's context and the device's switch to it, the runner's synchronize, the
// answer and the evaluator's probe), measured as the contestants are timed (after the flush in cold
// mode); it is subtracted from every contestant's samples alike. The probe is the reference runner's
// second entry (Runner::stage's second_entry): a process and a CUDA context of its own for it cost every
// evaluation a fourth context to create and destroy, which the driver does one at a time across every
// evaluation slot of the GPU (on an H200 at 6 slots, creating the evaluator's context took 2.5 s).
constexpr int kOverheadCalls = 60;
// How much less than the evaluator's clock a candidate's own CUDA-event times may claim (the gap between
// the clocks, its median against the reference's) before they are disbelieved and every contestant is
// timed by the evaluator's clock: the process hop (~300 us on an H200 host) makes that clock too coarse
// to settle smaller differences. A candidate that under-reports by less gains at most this per call.
// (Measured on an H200: honest kernels' gaps exceeded the reference's by 8.8 us (softmax) and 14.0 us
// (rmsnorm) against naive references of ~3 ms.)
constexpr double kClockAllowanceUs = 20;
constexpr double kClockAllowanceRel = 0.03;
// Each contestant has up to this many device arenas (separate allocations, other physical memory); the
// tensors move among them between blocks of rounds, so that where a contestant's memory happens to sit
// shows in the interval as spread instead of as a fixed offset between contestants.
constexpr size_t kArenas = 4;
// How far the median of the same kernel moves between evaluations on an H200, beyond its interval: A/A
// runs of a kernel of fixed duration (bench/timing/cuda_runner.sh, 10 evaluations each at ~13 us, ~105 us
// and ~1 ms) missed 1.0 by up to 0.6 us per median at 13 us (4.4 %), 1.15 us at 105 us and 1.0 us at 1 ms:
// a per-evaluation offset no placement, arena or second runner process removed. A median is taken as
// uncertain by the lesser of 1.5 us and 5 % of it; with that every one of those intervals holds 1.0.
// Memory-bound and atomic-bound kernels have an offset of their own, in proportion to their time: A/A runs
// of the bundled tasks' naive references (bench/timing/aa_tasks.sh, results/aa_tasks_h200_balanced.json,
// placements balanced between roles) came out 1.3-1.5 % faster as the candidate for reduce_sum (22 ms) and
// 1.1-1.5 % for transpose (1 ms), in every run; sgemm (26 ms) at 1.000. So a median is also uncertain by
// 0.75 % of it, which puts each of those runs' intervals around 1.0. (With arenas of whole 2 MiB,
// reduce_sum's offset went to 0.3 % at most; transpose's is still 0.4-1.0 %: its speed differs
// by arena, and each contestant has arenas of its own; see start().) In all it costs a 1 ms
// kernel 1.8 % of its lower bound, a 75 us one 5.5 %, a 13 us one 11.5 %.
constexpr double kReproducibilityUs = 1.5;
constexpr double kReproducibilityRel = 0.05;
constexpr double kReproducibilityProportional = 0.0075;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return eval::quantile_sorted(v, 0.5);
}

// How one call ended, on both clocks.
struct RawCall {
  eval::Device::Call call;
  double wall_us = 0;      // continue to answer, plus the evaluator's probe: the evaluator's clock
  double reported_us = 0;  // the runner's CUDA events around the call: precise, but the runner's word
};

// The fixed cost of a call on both clocks, from the overhead probe.
struct Overhead {
  double wall_us = 0;
  double reported_us = 0;
};

}  // namespace

struct CudaDevice::State {
  State(const task::TaskSpec& s, const eval::EvalOptions& o)
      : spec(s), options(o), scalars(s), cold(o.timing.mode == "cold") {}

  const task::TaskSpec& spec;
  const eval::EvalOptions& options;
  const eval::Scalars scalars;
  const bool cold;
  std::unique_ptr<detail::Gpu> gpu;
  std::vector<Contestant> all;  // candidate, reference, then the baselines
  // The call-overhead probe's runner, where the reference is a PyTorch module (a Python process's
  // clock gap is not a C runner's); without it the probe is the C reference runner's second entry.
  Contestant probe;
  size_t arenas = 1;  // device arenas per contestant
  // The case's timing tensors, drawn here by begin_timing(): the donor's inputs, and what every block
  // loads (load_block): inputs as perturbed so far, poisoned outputs.
  std::vector<DeviceBuffer> donor;
  std::vector<DeviceBuffer> master_in, master_out;
  DeviceBuffer compare_totals;  // compare_outputs()'s, one per output
  DeviceBuffer differing;       // inputs_are_donor()'s count
  Overhead overhead_before;
  // Where start() went (seconds): forking the runners, this process's context, the arenas, then waiting
  // for the runners (their contexts, the arenas mapped, the kernels loaded).
  std::vector<std::pair<std::string, double>> start_phases;
  const uint64_t placement_seed = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  bool host_clock = false;  // some case was timed by the evaluator's clock

  // The protocol's contestant `who` (candidate, reference, baselines).
  Contestant& at(size_t who) { return all[who]; }
  // The contestants and the probe's runner where there is one.
  std::vector<Contestant*> everyone() {
    std::vector<Contestant*> v;
    for (auto& c : all) v.push_back(&c);
    if (probe.runner) v.push_back(&probe);
    return v;
  }

  // `c`'s tensors laid out like `shapes` at its current placement, its inputs copied there from `from` (the
  // device's own copies), on the evaluator's stream (asynchronous).
  Status place_inputs(Contestant& c, const TensorSet& shapes, const std::vector<DeviceBuffer>& from) {
    c.layout = Layout(shapes, c.placement);
    for (size_t i = 0; i < shapes.inputs.size(); ++i) {
      KILN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(c.at(c.layout.in[i]), from[i].data(), shapes.inputs[i].bytes(),
                                                cudaMemcpyDeviceToDevice, gpu->stream.get()));
    }
    return Status::ok();
  }

  // `like`'s bytes at `data` (device memory) poisoned the `variant` way, as HostTensor::poison() does on the
  // host: one element poisoned there, repeated here. Asynchronous on the evaluator's stream.
  Status poison(void* data, const HostTensor& like, int variant) {
    HostTensor one(like.dtype(), {1});
    one.poison(variant);
    uint64_t pattern = 0;
    const size_t unit = task::dtype_bytes(like.dtype());
    std::memcpy(&pattern, one.data(), unit);
    KILN_CUDA_RETURN_IF_ERROR(repeat_on_device(data, like.bytes(), pattern, unit, gpu->stream.get()));
    return Status::ok();
  }

  // One call on `inputs`/`outputs`: the runner is continued, calls its kernel, synchronizes its device and
  // answers; the evaluator's probe follows. `flush` empties the L2 first (off the clock).
  Result<RawCall> call(Contestant& c, const std::vector<kiln_tensor>& inputs, const std::vector<kiln_tensor>& outputs,
                       bool flush, bool overhead_probe = false) {
    std::vector<kiln_tensor> live_in = inputs, live_out = outputs;
    kiln_args args{live_in.data(),
                   static_cast<int32_t>(live_in.size()),
                   live_out.data(),
                   static_cast<int32_t>(live_out.size()),
                   scalars.names.data(),
                   scalars.values.data(),
                   static_cast<int32_t>(scalars.names.size()),
                   nullptr};
    Runner& runner = *c.runner;
    KILN_RETURN_IF_ERROR(runner.stage(args, overhead_probe));
    if (flush) KILN_RETURN_IF_ERROR(gpu->flush_l2());
    RawCall o;
    const auto t0 = std::chrono::steady_clock::now();
    Result<int> rc = runner.invoke(nullptr);
    if (rc.is_ok()) KILN_RETURN_IF_ERROR(gpu->probe_device());
    const auto t1 = std::chrono::steady_clock::now();
    if (rc.is_ok()) {
      if (Status st = runner.freeze(); !st.is_ok()) rc = st;
    }
    if (!rc.is_ok()) {
      if (!runner.death()) return rc.status();
      o.call.death = runner.death()->what;
      return o;
    }
    runner.unstage(args);
    o.call.rc = *rc;
    if (std::string e = runner.device_error(); !e.empty()) o.call.device_error = "CUDA error " + e;
    o.wall_us = std::chrono::duration<double, std::micro>(t1 - t0).count();
    o.reported_us = runner.reported_us();
    auto same = [](const std::vector<kiln_tensor>& a, const std::vector<kiln_tensor>& b) {
      return std::memcmp(a.data(), b.data(), a.size() * sizeof(kiln_tensor)) == 0;
    };
    o.call.descriptors_changed = !same(inputs, live_in) || !same(outputs, live_out);
    return o;
  }

  // The fixed cost of a call on both clocks: medians of the overhead probe's calls (in the reference's
  // runner, which is trusted, or in a runner of its own beside a PyTorch reference). The probe's calls
  // are kept: their clock gap is what a C kernel's is when nobody lies (disbelief()).
  Result<Overhead> call_overhead() {
    const bool own = probe.runner != nullptr;
    Contestant& p = own ? probe : at(1);
    std::vector<double> wall, reported;
    for (int i = 0; i < kOverheadCalls; ++i) {
      KILN_ASSIGN_OR_RETURN(RawCall o, call(p, {}, {}, cold, !own));
      if (!o.call.ok()) return internal_error("the call-overhead probe failed: " + o.call.what());
      wall.push_back(o.wall_us);
      reported.push_back(o.reported_us);
    }
    if (own) {
      probe.wall_us.insert(probe.wall_us.end(), wall.begin(), wall.end());
      probe.reported_us.insert(probe.reported_us.end(), reported.begin(), reported.end());
    }
    return Overhead{median(wall), median(reported)};
  }

  // Whether the candidate's own CUDA-event times can be believed: the gap between the evaluator's clock and
  // them (its median) may exceed the reference's gap by at most kClockAllowanceUs + kClockAllowanceRel of
  // the candidate's time. Beside a PyTorch reference (whose gap holds the interpreter's own steps) the
  // gap to beat is the probe's, a C runner's. Empty when believed, else the reason.
  std::string disbelief() {
    auto gap = [](const Contestant& x) {
      std::vector<double> g(x.wall_us.size());
      for (size_t i = 0; i < g.size(); ++i) g[i] = x.wall_us[i] - x.reported_us[i];
      return median(std::move(g));
    };
    const Contestant& c = at(0);
    const double excess = gap(c) - gap(probe.runner ? probe : at(1));
    const double allowance = kClockAllowanceUs + kClockAllowanceRel * median(c.reported_us);
    if (excess <= allowance) return {};
    char line[256];
    std::snprintf(line, sizeof line,
                  "the candidate's own timings claim %.2f us per call less than the evaluator's clock allows "
                  "(allowance %.2f us): every contestant is timed by the evaluator's clock",
                  excess, allowance);
    return line;
  }
};

CudaDevice::CudaDevice(std::unique_ptr<State> state) : s_(std::move(state)) {}
CudaDevice::~CudaDevice() = default;

Result<std::unique_ptr<CudaDevice>> CudaDevice::start(const task::TaskSpec& spec, const eval::Candidate& candidate,
                                                      const eval::Candidate& reference,
                                                      const eval::EvalOptions& options) {
  auto s = std::make_unique<State>(spec, options);
  KILN_ASSIGN_OR_RETURN(std::vector<eval::RunnerKernel> kernels,
                        runner_kernels(spec, candidate, reference, options.python));
  const size_t with_arenas = kernels.size() - (spec.torch_reference() ? 1 : 0);  // the probe has none
  KILN_ASSIGN_OR_RETURN(const size_t arena, device_arena_bytes(spec));
  State& st = *s;
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  const auto began = Clock::now();
  Clock::time_point runners_from = began;
  auto after_fork = [&](Runner::Runners& runners) -> Status {
    st.start_phases.emplace_back("fork", since(began));
    auto phase = Clock::now();
    int devices = 0;
    KILN_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&devices));
    if (devices == 0) return failed_precondition("no CUDA device is visible");
    KILN_ASSIGN_OR_RETURN(st.gpu, open_gpu(st.cold));
    st.start_phases.emplace_back("context", since(phase));
    phase = Clock::now();
    // Several arenas each where the device has room for them: with the timing's own two copies of a case
    // (begin_timing(), at most an arena's worth each), a quarter of its free memory at most.
    size_t free_bytes = 0, total_bytes = 0;
    KILN_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
    st.arenas = kArenas;
    while (st.arenas > 1 && (st.arenas * with_arenas + 2) * arena > free_bytes / 4) --st.arenas;
    // The arenas are allocated in an order drawn for this evaluation. An allocation's speed can be its
    // own: on an H200 a naive transpose (strided writes over 256 MiB) ran 1014-1038 us by arena, and since
    // the allocator hands out the same memory in the same order each time, a fixed order gave the same
    // arenas to the same role in every evaluation: the reference 0.4-1.0 % slower in three A/A runs of four
    // (the fourth was noisy; bench/timing/results/aa_transpose_h200_per_arena). Drawn, the offset falls either way, so
    // a confirmation does not repeat the first measurement's.
    std::vector<std::vector<cudaIpcMemHandle_t>> handles(runners.size());
    for (size_t i = 0; i < with_arenas; ++i) {
      Contestant c;
      c.name = runners[i]->name();
      st.all.push_back(std::move(c));
    }
    for (size_t who : arena_allocation_order(with_arenas, st.arenas, st.placement_seed)) {
      KILN_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::allocate(arena));
      cudaIpcMemHandle_t handle;
      KILN_CUDA_RETURN_IF_ERROR(cudaIpcGetMemHandle(&handle, b.data()));
      handles[who].push_back(handle);
      st.all[who].arenas.push_back(std::move(b));
    }
    for (size_t i = 0; i < runners.size(); ++i) {
      KILN_RETURN_IF_ERROR(runners[i]->publish(handles[i].data(), handles[i].size() * sizeof(cudaIpcMemHandle_t)));
    }
    st.start_phases.emplace_back("arenas", since(phase));
    runners_from = Clock::now();
    return Status::ok();
  };
  KILN_ASSIGN_OR_RETURN(Runner::Runners runners,
                        Runner::start(kernels, 0, options.wipe_in_runners, &cuda_runner_device(), after_fork));
  st.start_phases.emplace_back("runners", since(runners_from));
  for (size_t i = 0; i < with_arenas; ++i) st.all[i].runner = std::move(runners[i]);
  if (runners.size() > with_arenas) {
    st.probe.name = "probe";
    st.probe.runner = std::move(runners.back());
  }
  if (log_arenas()) {
    for (const Contestant& c : st.all) std::fprintf(stderr, "%s: runner %d\n", c.name.c_str(), c.runner->pid());
  }
  std::unique_ptr<CudaDevice> d(new CudaDevice(std::move(s)));
  for (const auto& c : d->s_->all) d->names_.push_back(c.name);
  return d;
}

const std::vector<std::pair<std::string, double>>& CudaDevice::start_phases() const { return s_->start_phases; }

double CudaDevice::reproducibility_us(double median_us) const {
  return std::min(kReproducibilityUs, kReproducibilityRel * median_us) + kReproducibilityProportional * median_us;
}

std::string CudaDevice::timing_method() const { return s_->host_clock ? "host_clock" : "cuda_events_checked"; }

std::string CudaDevice::candidate_load_failure() const {
  const auto* d = s_->all[0].runner->death();
  return d && d->load_failed ? d->what : std::string();
}

// Any death before a call other than the candidate's load failure is a runner's set-up (its context, its
// arenas, its confinement): the evaluator's fault, whichever runner it was.
Status CudaDevice::check_started() const {
  for (const auto& c : s_->all) {
    if (const auto* d = c.runner->death()) return internal_error("the " + c.name + " runner: " + d->what);
  }
  return Status::ok();
}

int CudaDevice::candidate_pid() const { return s_->all[0].runner->pid(); }

Status CudaDevice::load(size_t who, const TensorSet& tensors) {
  Contestant& c = s_->at(who);
  c.layout = Layout(tensors, c.placement);
  return c.upload(tensors);
}

// A block's load, device to device from the case's own copy of its timing tensors: drawn by begin_timing()
// and perturbed with every contestant. A case of hundreds of MiB costs a fraction of a millisecond per block.
Status CudaDevice::load_block(size_t who, const TensorSet& shapes) {
  if (s_->master_in.size() != shapes.inputs.size() || s_->master_out.size() != shapes.outputs.size()) {
    return internal_error("load_block before begin_timing");
  }
  Contestant& c = s_->at(who);
  const cudaStream_t stream = s_->gpu->stream.get();
  KILN_RETURN_IF_ERROR(s_->place_inputs(c, shapes, s_->master_in));
  for (size_t i = 0; i < shapes.outputs.size(); ++i) {
    KILN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(c.at(c.layout.out[i]), s_->master_out[i].data(),
                                              shapes.outputs[i].bytes(), cudaMemcpyDeviceToDevice, stream));
  }
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return Status::ok();
}

Status CudaDevice::read(size_t who, TensorSet& into, bool inputs_too) { return s_->at(who).download(into, inputs_too); }

static_assert(static_cast<int>(CompareType::kF32) == static_cast<int>(task::DType::kF32) &&
                  static_cast<int>(CompareType::kF16) == static_cast<int>(task::DType::kF16) &&
                  static_cast<int>(CompareType::kBF16) == static_cast<int>(task::DType::kBF16) &&
                  static_cast<int>(CompareType::kF64) == static_cast<int>(task::DType::kF64) &&
                  static_cast<int>(CompareType::kI32) == static_cast<int>(task::DType::kI32) &&
                  static_cast<int>(CompareType::kI64) == static_cast<int>(task::DType::kI64) &&
                  static_cast<int>(CompareType::kI8) == static_cast<int>(task::DType::kI8) &&
                  static_cast<int>(CompareType::kU8) == static_cast<int>(task::DType::kU8),
              "compare.h numbers the element types as task::DType does");
static_assert(static_cast<int>(DrawKind::kNormal) == static_cast<int>(task::InitKind::kNormal) &&
                  static_cast<int>(DrawKind::kUniform) == static_cast<int>(task::InitKind::kUniform) &&
                  static_cast<int>(DrawKind::kInt) == static_cast<int>(task::InitKind::kInt) &&
                  static_cast<int>(DrawKind::kZeros) == static_cast<int>(task::InitKind::kZeros) &&
                  static_cast<int>(DrawKind::kOnes) == static_cast<int>(task::InitKind::kOnes),
              "draw.h numbers the ways of drawing as task::InitKind does");

// Both contestants' outputs compared in their arenas, on the evaluator's stream: after a call (the runner
// synchronized its device before answering), so what is compared is what the call left.
Result<bool> CudaDevice::compare_outputs(size_t got, size_t expected, double rtol, double atol,
                                         std::vector<eval::Comparison>& per_output) {
  const Contestant& g = s_->at(got);
  const Contestant& e = s_->at(expected);
  const size_t outputs = g.layout.outputs.size();
  if (e.layout.outputs.size() != outputs) return internal_error("compare_outputs: the contestants' outputs differ");
  if (s_->compare_totals.bytes() < outputs * sizeof(CompareTotals)) {
    KILN_ASSIGN_OR_RETURN(s_->compare_totals, DeviceBuffer::allocate(outputs * sizeof(CompareTotals)));
  }
  auto* totals = static_cast<CompareTotals*>(s_->compare_totals.data());
  const cudaStream_t stream = s_->gpu->stream.get();
  KILN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(totals, 0, outputs * sizeof(CompareTotals), stream));
  for (size_t i = 0; i < outputs; ++i) {
    const kiln_tensor& gt = g.layout.outputs[i];
    const kiln_tensor& et = e.layout.outputs[i];
    KILN_CUDA_RETURN_IF_ERROR(compare_on_device(g.at(g.layout.out[i]), static_cast<CompareType>(gt.dtype),
                                                e.at(e.layout.out[i]), static_cast<CompareType>(et.dtype),
                                                std::min(eval::tensor_elements(gt), eval::tensor_elements(et)), rtol,
                                                atol, totals + i, stream));
  }
  std::vector<CompareTotals> host(outputs);
  KILN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host.data(), totals, outputs * sizeof(CompareTotals), cudaMemcpyDeviceToHost, stream));
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  per_output.assign(outputs, eval::Comparison{});
  for (size_t i = 0; i < outputs; ++i) {
    per_output[i].mismatches = static_cast<int64_t>(host[i].mismatches);
    per_output[i].nonfinite = static_cast<int64_t>(host[i].nonfinite);
    std::memcpy(&per_output[i].max_abs_error, &host[i].max_abs_error_bits, sizeof(double));
    std::memcpy(&per_output[i].max_rel_error, &host[i].max_rel_error_bits, sizeof(double));
  }
  return true;
}

Result<eval::Device::Call> CudaDevice::call(size_t who, CallKind kind) {
  Contestant& c = s_->at(who);
  const bool timed = kind == CallKind::kTimed;
  KILN_ASSIGN_OR_RETURN(RawCall o, s_->call(c, c.layout.inputs, c.layout.outputs, timed && s_->cold));
  if (timed && o.call.ok()) {
    c.wall_us.push_back(o.wall_us);
    c.reported_us.push_back(o.reported_us);
    // The stopping rule follows the reported times (the wall clock's noise is mostly the process hop).
    o.call.sample_us = std::max(o.reported_us - s_->overhead_before.reported_us, o.reported_us * 0.1);
  }
  return o.call;
}

Status CudaDevice::check_case(const TensorSet& shapes) {
  for (size_t who = 2; who < contestants(); ++who) {
    if (name(who) == "cublas_sgemm") return check_sgemm(shapes);
  }
  return Status::ok();
}

// The donor and the first block's tensors are drawn here, never on the host: perturb() copies from the
// donor into every contestant's arena alike, and load_block() loads from the case's own copy.
Status CudaDevice::begin_timing(const task::TaskSpec& spec, const TensorSet& shapes, uint64_t first_seed,
                                uint64_t donor_seed) {
  s_->donor.clear();
  s_->master_in.clear();
  s_->master_out.clear();
  const cudaStream_t stream = s_->gpu->stream.get();
  auto room = [](const Status& st) {
    return st.with_context("no device memory for the timing's own copy of the case's tensors");
  };
  for (size_t i = 0; i < shapes.inputs.size(); ++i) {
    const HostTensor& t = shapes.inputs[i];
    const task::TensorSpec& how = spec.inputs[i];
    const auto type = static_cast<CompareType>(t.dtype());
    const auto kind = static_cast<DrawKind>(how.init);
    for (auto [into, seed] : {std::pair{&s_->master_in, first_seed}, std::pair{&s_->donor, donor_seed}}) {
      auto b = DeviceBuffer::allocate(std::max<size_t>(t.bytes(), 1));
      if (!b.is_ok()) return room(b.status());
      KILN_CUDA_RETURN_IF_ERROR(
          draw_on_device(b->data(), type, t.elements(), kind, how.init_a, how.init_b, eval::mix_seed(seed, i), stream));
      into->push_back(std::move(b).value());
    }
  }
  for (const HostTensor& t : shapes.outputs) {
    auto b = DeviceBuffer::allocate(std::max<size_t>(t.bytes(), 1));
    if (!b.is_ok()) return room(b.status());
    KILN_RETURN_IF_ERROR(s_->poison(b->data(), t, 0));
    s_->master_out.push_back(std::move(b).value());
  }
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  for (auto* c : s_->everyone()) {
    c->wall_us.clear();
    c->reported_us.clear();
  }
  return Status::ok();
}

// Every block moves each contestant's tensors to another arena and offset (the protocol loads them again).
// Block b gives contestant `who` the placement drawn for b + who, so that over a case's blocks every
// contestant goes through the same placements but one: a placement that suits a kernel (where its output
// falls in the L2, say) then favours no role. With a placement of its own per role and block from a fixed
// seed, A/A runs of long kernels came out up to 3 % off 1.0, the same way in every run. The draws start
// from a seed of this evaluation, so evaluations do not all repeat one sequence.
Result<eval::Device::Block> CudaDevice::begin_block(uint64_t block) {
  for (size_t who = 0; who < contestants(); ++who) {
    const uint64_t draw = eval::mix_seed(s_->placement_seed, block + who);
    s_->at(who).placement = {draw % (kPlacementSlack / kTensorAlignment) * kTensorAlignment, (draw >> 32) % s_->arenas};
  }
  return Block{};
}

std::string CudaDevice::placement(size_t who) const {
  const Placement& p = s_->at(who).placement;
  return "arena " + std::to_string(p.arena) + " +" + std::to_string(p.offset / 1024) + " KiB";
}

int CudaDevice::placement_group(size_t who) const { return static_cast<int>(s_->at(who).placement.arena); }

Status CudaDevice::perturb(size_t who, const std::vector<eval::PerturbBlock>& blocks) {
  const cudaStream_t stream = s_->gpu->stream.get();
  // Block i of the donor into input i at `base(i)`; the element size from the candidate's descriptor's
  // dtype (every contestant and the donor hold the same tensors).
  auto copy_blocks = [&](auto base) -> Status {
    for (size_t i = 0; i < blocks.size() && i < s_->donor.size(); ++i) {
      if (blocks[i].len == 0) continue;
      const size_t elem = task::dtype_bytes(static_cast<task::DType>(s_->at(0).layout.inputs[i].dtype));
      KILN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(base(i) + blocks[i].first * elem,
                                                static_cast<const char*>(s_->donor[i].data()) + blocks[i].source * elem,
                                                blocks[i].len * elem, cudaMemcpyDeviceToDevice, stream));
    }
    return Status::ok();
  };
  // The case's own copy (load_block loads the next block from it) is read on this stream only.
  if (who == kOwnCopy) {
    if (s_->master_in.empty()) return Status::ok();
    return copy_blocks([&](size_t i) { return static_cast<char*>(s_->master_in[i].data()); });
  }
  // A contestant's runner calls on a stream of its own: the copy is done before it is called.
  Contestant& c = s_->at(who);
  KILN_RETURN_IF_ERROR(copy_blocks([&](size_t i) { return c.at(c.layout.in[i]); }));
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return Status::ok();
}

Status CudaDevice::begin_rounds() {
  KILN_ASSIGN_OR_RETURN(s_->overhead_before, s_->call_overhead());
  return Status::ok();
}

// The runners' CUDA events are precise; the candidate's are its own word. When they disagree with the
// evaluator's clock, everybody is timed on that clock: coarser (the process hop), never in its favour.
// Each sample loses the fixed cost of a call on its clock (from the overhead probe), never below a
// tenth of the raw time: the subtraction corrects a bias, it must not invent speed.
Status CudaDevice::end_timing(std::vector<std::vector<double>>& samples, std::string& note) {
  KILN_ASSIGN_OR_RETURN(const Overhead after, s_->call_overhead());
  const Overhead& before = s_->overhead_before;
  const Overhead overhead{(before.wall_us + after.wall_us) / 2, (before.reported_us + after.reported_us) / 2};
  const std::string doubt = s_->disbelief();
  if (!doubt.empty()) s_->host_clock = true;
  for (size_t who = 0; who < contestants(); ++who) {
    const Contestant& c = s_->at(who);
    // A PyTorch contestant's events are its own trusted runner's (no candidate code runs there): on the
    // evaluator's clock it would also carry the interpreter's steps, which a C kernel's call does not.
    const bool own_clock = doubt.empty() || c.runner->python();
    samples[who].clear();
    for (size_t i = 0; i < c.wall_us.size(); ++i) {
      const double raw = own_clock ? c.reported_us[i] : c.wall_us[i];
      const double fixed = own_clock ? overhead.reported_us : overhead.wall_us;
      samples[who].push_back(std::max(raw - fixed, raw * 0.1));
    }
  }
  char line[256];
  std::snprintf(line, sizeof line,
                "call overhead %.2f us subtracted (evaluator's clock %.2f us; before/after timing %.2f/%.2f us)",
                overhead.reported_us, overhead.wall_us, before.reported_us, after.reported_us);
  note = doubt.empty() ? line : doubt + "; " + line;
  for (auto& c : s_->all) c.placement = {};
  s_->master_in.clear();
  s_->master_out.clear();
  return Status::ok();
}

// The donor (kept after timing) into contestant `who`'s arena, device to device, its outputs poisoned there.
Status CudaDevice::load_donor(size_t who, const TensorSet& shapes, int variant) {
  if (s_->donor.size() != shapes.inputs.size()) return internal_error("load_donor before begin_timing");
  Contestant& c = s_->at(who);
  KILN_RETURN_IF_ERROR(s_->place_inputs(c, shapes, s_->donor));
  for (size_t i = 0; i < shapes.outputs.size(); ++i) {
    KILN_RETURN_IF_ERROR(s_->poison(c.at(c.layout.out[i]), shapes.outputs[i], variant));
  }
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s_->gpu->stream.get()));
  return Status::ok();
}

Result<bool> CudaDevice::inputs_are_donor(size_t who) {
  const Contestant& c = s_->at(who);
  if (s_->donor.size() != c.layout.inputs.size()) return internal_error("inputs_are_donor before load_donor");
  if (s_->differing.bytes() < sizeof(unsigned long long)) {
    KILN_ASSIGN_OR_RETURN(s_->differing, DeviceBuffer::allocate(sizeof(unsigned long long)));
  }
  auto* count = static_cast<unsigned long long*>(s_->differing.data());
  const cudaStream_t stream = s_->gpu->stream.get();
  KILN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(count, 0, sizeof *count, stream));
  for (size_t i = 0; i < c.layout.inputs.size(); ++i) {
    KILN_CUDA_RETURN_IF_ERROR(count_differences(c.at(c.layout.in[i]), s_->donor[i].data(),
                                                eval::tensor_bytes(c.layout.inputs[i]), count, stream));
  }
  unsigned long long host = 0;
  KILN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&host, count, sizeof host, cudaMemcpyDeviceToHost, stream));
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return host == 0;
}

Status CudaDevice::read_donor(TensorSet& into) {
  for (size_t i = 0; i < into.inputs.size() && i < s_->donor.size(); ++i) {
    KILN_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(into.inputs[i].data(), s_->donor[i].data(), into.inputs[i].bytes(), cudaMemcpyDeviceToHost));
  }
  return Status::ok();
}

}  // namespace kiln::cuda
