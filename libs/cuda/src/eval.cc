#include "kiln/cuda/eval.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include "kiln/cuda/nvml.h"
#include "kiln/cuda/runtime.h"
#include "kiln/eval/detail/protocol.h"
#include "kiln/eval/detail/runner.h"
#include "kiln/eval/detail/tensor.h"
#include "kiln/eval/stats.h"
#include "runner_device.h"

namespace kiln::cuda {
namespace {

using eval::detail::Findings;
using eval::detail::HostTensor;
using eval::detail::Runner;
using eval::detail::Scalars;
using eval::detail::TensorSet;

// Calls of the overhead runner whose median is the fixed cost every call pays (waking a stopped process,
// one tiny launch in the runner's context and the device's switch to it, the runner's synchronize, the
// answer and the evaluator's probe), measured as the contestants are timed (after the flush in cold
// mode); it is subtracted from every contestant's samples alike.
constexpr int kOverheadCalls = 60;
// How much less than the evaluator's clock a candidate's own CUDA-event times may claim (the gap between
// the clocks, its median against the reference's) before they are disbelieved and every contestant is
// timed by the evaluator's clock: the process hop (~300 us on an H200 host) makes that clock too coarse
// to settle smaller differences. A candidate that under-reports by less gains at most this per call.
// (Measured on an H200: honest kernels' gaps exceeded the reference's by 8.8 us (softmax) and 14.0 us
// (rmsnorm) against naive references of ~3 ms.)
constexpr double kClockAllowanceUs = 20;
constexpr double kClockAllowanceRel = 0.03;
// The flush buffer is this many times the L2: one pass of writes evicts every line.
constexpr size_t kFlushL2Multiple = 2;
constexpr size_t kFallbackL2Bytes = 64u << 20;
// Tensors start on this alignment in a contestant's device arena; between blocks of timing rounds they
// move by a multiple of it, up to kPlacementSlack (other pages and memory channels for every contestant).
constexpr size_t kTensorAlignment = 4096;
constexpr size_t kPlacementSlack = 64 * kTensorAlignment;
// Each contestant has up to this many device arenas (separate allocations, other physical memory); the
// tensors move among them between blocks of rounds, so that where a contestant's memory happens to sit
// shows in the interval as spread instead of as a fixed offset between contestants.
constexpr size_t kArenas = 4;
// A block of timing rounds lasts at least this many rounds and min_time_s / kBlocks seconds; the
// speedup interval resamples whole blocks.
constexpr int64_t kMinBlockRounds = 2;
constexpr double kBlocks = 10;

constexpr size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// --- the evaluator's device: its own context, stream, flush buffer and probe ------------------------------

struct Device {
  Stream stream;
  DeviceBuffer flush;
  DeviceBuffer probe;
  int flush_round = 0;

  Status flush_l2() {
    // cudaMemsetAsync writes every line of a buffer twice the L2: nothing a kernel reads survives it.
    KILN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(flush.data(), ++flush_round & 0xff, flush.bytes(), stream.get()));
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream.get()));
    return Status::ok();
  }
  // Work of this context issued right after a runner answered: it has to get the device, so a kernel
  // the runner left running (its own synchronize skipped) either delays it or shares the device with it.
  Status probe_device() {
    KILN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(probe.data(), 0, probe.bytes(), stream.get()));
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream.get()));
    return Status::ok();
  }
};

Result<std::unique_ptr<Device>> open_device(bool cold) {
  auto d = std::make_unique<Device>();
  KILN_ASSIGN_OR_RETURN(d->stream, Stream::create());
  KILN_ASSIGN_OR_RETURN(d->probe, DeviceBuffer::allocate(256));
  if (cold) {
    int device = 0, l2 = 0;
    KILN_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
    KILN_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
    const size_t l2_bytes = l2 > 0 ? static_cast<size_t>(l2) : kFallbackL2Bytes;
    KILN_ASSIGN_OR_RETURN(d->flush, DeviceBuffer::allocate(kFlushL2Multiple * l2_bytes));
  }
  return d;
}

// Device bytes one contestant needs for the largest case, with the placement slack.
Result<size_t> arena_bytes_for(const task::TaskSpec& spec) {
  KILN_RETURN_IF_ERROR(eval::detail::check_runner_limits(spec));
  KILN_ASSIGN_OR_RETURN(const size_t most, eval::detail::largest_case_bytes(spec, kTensorAlignment));
  return most + kPlacementSlack;
}

kiln_tensor descriptor(const HostTensor& shape_of, void* staged_data) {
  kiln_tensor t{};
  t.data = staged_data;
  t.dtype = static_cast<int32_t>(shape_of.dtype());
  t.ndim = static_cast<int32_t>(shape_of.shape().size());
  for (size_t d = 0; d < shape_of.shape().size() && d < KILN_MAX_DIMS; ++d) t.shape[d] = shape_of.shape()[d];
  return t;
}

// Where the tensors of one case sit: which of a contestant's device arenas, and where in it.
struct Layout {
  size_t arena = 0;
  std::vector<size_t> in, out;             // offsets in the arena
  std::vector<kiln_tensor> inputs, outputs;  // descriptors as the runner gets them (arena and offset)

  Layout(const TensorSet& shapes, size_t placement, size_t arena_index = 0) : arena(arena_index) {
    size_t offset = placement / kTensorAlignment * kTensorAlignment;
    auto place = [&](const HostTensor& t, std::vector<size_t>& at, std::vector<kiln_tensor>& d) {
      at.push_back(offset);
      d.push_back(descriptor(t, encode_arena_offset(arena, offset)));
      offset += round_up(std::max<size_t>(t.bytes(), 1), kTensorAlignment);
    };
    for (const auto& t : shapes.inputs) place(t, in, inputs);
    for (const auto& t : shapes.outputs) place(t, out, outputs);
  }
};

// One contestant: its runner, and the device arenas the evaluator owns and shares with that runner alone.
struct Contestant {
  std::string name;
  std::unique_ptr<Runner> runner;
  std::vector<DeviceBuffer> arenas;
  std::vector<double> samples_us;
  std::vector<double> wall_us, reported_us;  // raw, per timed call
  eval::RunningStats running;

  char* at(const Layout& l, size_t offset) const { return static_cast<char*>(arenas[l.arena].data()) + offset; }

  Status upload_inputs(const Layout& l, const TensorSet& host) {
    for (size_t i = 0; i < host.inputs.size(); ++i) {
      KILN_CUDA_RETURN_IF_ERROR(cudaMemcpy(at(l, l.in[i]), host.inputs[i].data(), host.inputs[i].bytes(), cudaMemcpyHostToDevice));
    }
    KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    return Status::ok();
  }
  Status upload_outputs(const Layout& l, const std::vector<HostTensor>& values) {
    for (size_t i = 0; i < values.size(); ++i) {
      KILN_CUDA_RETURN_IF_ERROR(cudaMemcpy(at(l, l.out[i]), values[i].data(), values[i].bytes(), cudaMemcpyHostToDevice));
    }
    KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    return Status::ok();
  }
  Status download(const Layout& l, TensorSet& host, bool inputs_too) const {
    for (size_t i = 0; inputs_too && i < host.inputs.size(); ++i) {
      KILN_CUDA_RETURN_IF_ERROR(cudaMemcpy(host.inputs[i].data(), at(l, l.in[i]), host.inputs[i].bytes(), cudaMemcpyDeviceToHost));
    }
    for (size_t i = 0; i < host.outputs.size(); ++i) {
      KILN_CUDA_RETURN_IF_ERROR(cudaMemcpy(host.outputs[i].data(), at(l, l.out[i]), host.outputs[i].bytes(), cudaMemcpyDeviceToHost));
    }
    return Status::ok();
  }
};

// How one call ended: kiln_entry's code, the device error the runner saw after it, a dead runner, and
// whether the kernel changed the descriptors it was given.
struct CallOutcome {
  int rc = 0;
  std::string device_error;
  std::string death;
  bool descriptors_changed = false;
  double us = 0;           // continue to answer, plus the evaluator's probe: the evaluator's clock
  double reported_us = 0;  // the runner's CUDA events around the call: precise, but the runner's word
  bool ok() const { return rc == 0 && device_error.empty() && death.empty(); }
  std::string what() const {
    if (!death.empty()) return death;
    if (!device_error.empty()) return "CUDA error " + device_error;
    return "kiln_entry returned " + std::to_string(rc);
  }
};

std::vector<HostTensor> poisoned(const TensorSet& shapes, int variant) {
  std::vector<HostTensor> out = shapes.outputs;
  for (auto& t : out) t.poison(variant);
  return out;
}

// --- one evaluation --------------------------------------------------------------------------------------

class Evaluation {
 public:
  Evaluation(const task::TaskSpec& spec, const eval::EvalOptions& options) : spec_(spec), options_(options), scalars_(spec) {}

  // Forks a runner per contestant (before this process touches CUDA), then creates this process's
  // context, device arenas per contestant and hands each runner the IPC handles of its own.
  Status start(const eval::Candidate& candidate, const eval::Candidate& reference) {
    std::vector<eval::detail::RunnerKernel> kernels = {
        {"candidate", candidate.entry, candidate.library, nullptr},
        {"reference", reference.entry, reference.library, nullptr},
        {"overhead", overhead_entry, "", nullptr}};
    for (const auto& b : spec_.baselines) kernels.push_back({b, cublas_sgemm_entry, "", nullptr});
    KILN_ASSIGN_OR_RETURN(const size_t arena, arena_bytes_for(spec_));
    auto after_fork = [&](Runner::Runners& runners) -> Status {
      int devices = 0;
      KILN_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&devices));
      if (devices == 0) return failed_precondition("no CUDA device is visible");
      KILN_ASSIGN_OR_RETURN(device_, open_device(options_.timing.mode == "cold"));
      // Several arenas each where the device has room for them (a quarter of its free memory at most).
      size_t free_bytes = 0, total_bytes = 0;
      KILN_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
      const size_t with_arenas = runners.size() - 1;
      arenas_ = kArenas;
      while (arenas_ > 1 && arenas_ * arena * with_arenas > free_bytes / 4) --arenas_;
      for (size_t i = 0; i < runners.size(); ++i) {
        Contestant c;
        c.name = runners[i]->name();
        std::vector<cudaIpcMemHandle_t> handles;
        for (size_t k = 0; c.name != "overhead" && k < arenas_; ++k) {
          KILN_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::allocate(arena));
          cudaIpcMemHandle_t handle;
          KILN_CUDA_RETURN_IF_ERROR(cudaIpcGetMemHandle(&handle, b.data()));
          handles.push_back(handle);
          c.arenas.push_back(std::move(b));
        }
        KILN_RETURN_IF_ERROR(runners[i]->publish(handles.data(), handles.size() * sizeof(cudaIpcMemHandle_t)));
        all_.push_back(std::move(c));
      }
      return Status::ok();
    };
    KILN_ASSIGN_OR_RETURN(Runner::Runners runners,
                          Runner::start(kernels, 0, options_.wipe_in_runners, &cuda_runner_device(), after_fork));
    for (size_t i = 0; i < runners.size(); ++i) all_[i].runner = std::move(runners[i]);
    return Status::ok();
  }

  Contestant& candidate() { return all_[0]; }
  Contestant& reference() { return all_[1]; }
  Contestant& overhead() { return all_[2]; }

  // The candidate's runner could not load it: its message, else empty.
  std::string candidate_load_failure() const {
    const auto* d = all_[0].runner->death();
    return d && d->load_failed ? d->what : std::string();
  }
  // Any death before a call other than the candidate's load failure is a runner's set-up (its context,
  // its arenas, its confinement): the evaluator's fault, whichever runner it was.
  Status check_runners_started() const {
    for (size_t i = 0; i < all_.size(); ++i) {
      if (const auto* d = all_[i].runner->death()) return internal_error("the " + all_[i].name + " runner: " + d->what);
    }
    return Status::ok();
  }

  // One call of a contestant on the tensors at `l`: the runner is continued, calls its kernel, synchronizes
  // its device and answers; the evaluator's probe follows. `cold` flushes the L2 first (outside the clock).
  Result<CallOutcome> call(Contestant& c, const std::vector<kiln_tensor>& inputs, const std::vector<kiln_tensor>& outputs,
                           bool cold) {
    std::vector<kiln_tensor> live_in = inputs, live_out = outputs;
    kiln_args args{live_in.data(),          static_cast<int32_t>(live_in.size()),
                   live_out.data(),         static_cast<int32_t>(live_out.size()),
                   scalars_.names.data(),   scalars_.values.data(),
                   static_cast<int32_t>(scalars_.names.size()), nullptr};
    KILN_RETURN_IF_ERROR(c.runner->stage(args));
    if (cold) KILN_RETURN_IF_ERROR(device_->flush_l2());
    CallOutcome o;
    const auto t0 = std::chrono::steady_clock::now();
    Result<int> rc = c.runner->invoke(nullptr);
    if (rc.is_ok()) KILN_RETURN_IF_ERROR(device_->probe_device());
    const auto t1 = std::chrono::steady_clock::now();
    if (rc.is_ok()) {
      if (Status st = c.runner->freeze(); !st.is_ok()) rc = st;
    }
    if (!rc.is_ok()) {
      if (!c.runner->death()) return rc.status();
      o.death = c.runner->death()->what;
      return o;
    }
    c.runner->unstage(args);
    o.rc = *rc;
    o.device_error = c.runner->device_error();
    o.us = std::chrono::duration<double, std::micro>(t1 - t0).count();
    o.reported_us = c.runner->reported_us();
    auto same = [](const std::vector<kiln_tensor>& a, const std::vector<kiln_tensor>& b) {
      return std::memcmp(a.data(), b.data(), a.size() * sizeof(kiln_tensor)) == 0;
    };
    o.descriptors_changed = !same(inputs, live_in) || !same(outputs, live_out);
    return o;
  }
  Result<CallOutcome> call(Contestant& c, const Layout& l, bool cold = false) { return call(c, l.inputs, l.outputs, cold); }

  // A candidate call that failed is recorded in `f_` (true: stop evaluating); a failing trusted
  // contestant is an error.
  Result<bool> failed(const Contestant& c, const CallOutcome& o, const std::string& context) {
    if (o.ok()) return false;
    if (&c != &all_[0]) return internal_error("the " + c.name + " failed: " + o.what() + " (" + context + ")");
    if (!o.death.empty()) {
      f_.crashed = o.death + " (" + context + ")";
    } else if (!o.device_error.empty()) {
      f_.failed_call = "CUDA error " + o.device_error + " after the candidate's kiln_entry (" + context + ")";
    } else {
      f_.failed_call = eval::detail::call_failure(o.rc, context);
    }
    return true;
  }
  bool candidate_failed() const { return !f_.failed_call.empty() || !f_.crashed.empty(); }

  // DESIGN §5 correctness for one case and seed.
  Status check_case(const TensorSet& pristine, const std::string& context) {
    const Layout l(pristine, 0);
    Contestant& cand = candidate();
    Contestant& ref = reference();
    KILN_RETURN_IF_ERROR(cand.upload_inputs(l, pristine));
    KILN_RETURN_IF_ERROR(cand.upload_outputs(l, poisoned(pristine, 0)));
    KILN_RETURN_IF_ERROR(ref.upload_inputs(l, pristine));
    KILN_RETURN_IF_ERROR(ref.upload_outputs(l, poisoned(pristine, 0)));

    KILN_ASSIGN_OR_RETURN(CallOutcome o, call(cand, l));
    KILN_ASSIGN_OR_RETURN(bool stop, failed(cand, o, context));
    if (stop) return Status::ok();
    note_descriptors(o, context);
    TensorSet first = pristine;
    KILN_RETURN_IF_ERROR(cand.download(l, first, true));
    eval::detail::check_inputs(spec_, first, pristine, context, f_);

    KILN_ASSIGN_OR_RETURN(o, call(ref, l));
    KILN_RETURN_IF_ERROR(failed(ref, o, context).status());
    TensorSet expected = pristine;
    KILN_RETURN_IF_ERROR(ref.download(l, expected, false));

    // The second call gets fresh inputs and outputs poisoned again: a kernel that leans on what the first
    // call left in device memory fails here.
    KILN_RETURN_IF_ERROR(cand.upload_inputs(l, pristine));
    KILN_RETURN_IF_ERROR(cand.upload_outputs(l, poisoned(pristine, 1)));
    KILN_ASSIGN_OR_RETURN(o, call(cand, l));
    KILN_ASSIGN_OR_RETURN(stop, failed(cand, o, context + ", second call"));
    if (stop) return Status::ok();
    note_descriptors(o, context + ", second call");
    TensorSet second = pristine;
    KILN_RETURN_IF_ERROR(cand.download(l, second, true));
    eval::detail::check_inputs(spec_, second, pristine, context + ", second call", f_);

    eval::detail::compare_outputs(spec_, first, expected, context, f_);
    eval::detail::compare_outputs(spec_, second, expected, context + ", second call", f_);
    return Status::ok();
  }

  Status correctness() {
    for (const auto& dims : spec_.correctness_cases) {
      const std::string shape = task::dims_string(dims);
      KILN_ASSIGN_OR_RETURN(TensorSet pristine, eval::detail::allocate(spec_, dims));
      f_.tested(shape);
      for (int64_t seed = 0; seed < spec_.seeds && !candidate_failed(); ++seed) {
        eval::detail::fill_inputs(spec_, pristine, static_cast<uint64_t>(seed));
        KILN_RETURN_IF_ERROR(check_case(pristine, shape + " seed " + std::to_string(seed)));
      }
      if (candidate_failed()) break;
    }
    return Status::ok();
  }

  // The fixed cost of a call on both clocks, from the overhead runner: medians subtracted from every sample.
  struct Overhead {
    double wall_us = 0;
    double reported_us = 0;
  };
  Result<Overhead> call_overhead(bool cold) {
    std::vector<double> wall, reported;
    for (int i = 0; i < kOverheadCalls; ++i) {
      KILN_ASSIGN_OR_RETURN(CallOutcome o, call(overhead(), {}, {}, cold));
      KILN_RETURN_IF_ERROR(failed(overhead(), o, "overhead").status());
      wall.push_back(o.us);
      reported.push_back(o.reported_us);
    }
    return Overhead{median(wall), median(reported)};
  }

  static double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return eval::quantile_sorted(v, 0.5);
  }

  // Whether the candidate's own CUDA-event times can be believed: the gap between the evaluator's clock and
  // them (its median) may exceed the reference's gap by at most kClockAllowanceUs + kClockAllowanceRel of
  // the candidate's time. Empty when believed, else the reason.
  std::string disbelief(const Contestant& c, const Contestant& reference) {
    auto gap = [](const Contestant& x) {
      std::vector<double> g(x.wall_us.size());
      for (size_t i = 0; i < g.size(); ++i) g[i] = x.wall_us[i] - x.reported_us[i];
      return median(std::move(g));
    };
    const double excess = gap(c) - gap(reference);
    const double allowance = kClockAllowanceUs + kClockAllowanceRel * median(c.reported_us);
    if (excess <= allowance) return {};
    char line[256];
    std::snprintf(line, sizeof line,
                  "the candidate's own timings claim %.2f us per call less than the evaluator's clock allows "
                  "(allowance %.2f us): every contestant is timed by the evaluator's clock",
                  excess, allowance);
    return line;
  }

  // A contestant's samples on one clock, less that clock's fixed cost (from the overhead runner), never
  // below a tenth of the raw time: the subtraction corrects a bias, it must not invent speed.
  static void settle_samples(Contestant& c, const Overhead& overhead, bool events) {
    c.samples_us.clear();
    for (size_t i = 0; i < c.wall_us.size(); ++i) {
      const double raw = events ? c.reported_us[i] : c.wall_us[i];
      const double fixed = events ? overhead.reported_us : overhead.wall_us;
      c.samples_us.push_back(std::max(raw - fixed, raw * 0.1));
    }
  }

  // Timing of one benchmark case; false when the candidate failed (recorded).
  Result<bool> time_case(const task::Dims& dims, TensorSet& host, proto::CaseTiming& timing) {
    const eval::TimingOptions& opt = options_.timing;
    const bool cold = opt.mode == "cold";
    const std::string shape = task::dims_string(dims);
    std::vector<Contestant*> timed = {&candidate(), &reference()};
    for (size_t i = 3; i < all_.size(); ++i) {
      KILN_RETURN_IF_ERROR(check_sgemm(host).with_context("case " + shape));
      timed.push_back(&all_[i]);
    }
    for (Contestant* c : timed) {
      c->samples_us.clear();
      c->wall_us.clear();
      c->reported_us.clear();
      c->running = {};
    }

    // Inputs that move: a donor set on the device (and its host twin) from which a block of every input is
    // copied before each round, into every contestant's arena alike; `host` follows, so a new layout can
    // be uploaded as the inputs stand.
    TensorSet donor = host;
    eval::detail::fill_inputs(spec_, donor, eval::detail::kTimingSeed + 1);
    std::vector<DeviceBuffer> donor_device;
    for (const auto& t : donor.inputs) {
      KILN_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::allocate(std::max<size_t>(t.bytes(), 1)));
      KILN_CUDA_RETURN_IF_ERROR(cudaMemcpy(b.data(), t.data(), t.bytes(), cudaMemcpyHostToDevice));
      donor_device.push_back(std::move(b));
    }
    std::vector<Layout> layouts(timed.size(), Layout(host, 0));
    const std::vector<HostTensor> poison = poisoned(host, 0);
    auto place_all = [&](uint64_t block) -> Status {
      for (size_t i = 0; i < timed.size(); ++i) {
        const uint64_t draw = eval::detail::mix_seed(eval::detail::mix_seed(eval::detail::kTimingSeed + 3, block), i);
        layouts[i] = Layout(host, draw % (kPlacementSlack / kTensorAlignment) * kTensorAlignment,
                            (draw >> 32) % arenas_);
        KILN_RETURN_IF_ERROR(timed[i]->upload_inputs(layouts[i], host));
        KILN_RETURN_IF_ERROR(timed[i]->upload_outputs(layouts[i], poison));
      }
      return Status::ok();
    };
    auto perturb = [&](uint64_t round) -> Status {
      for (size_t i = 0; i < host.inputs.size(); ++i) {
        const size_t n = host.inputs[i].elements();
        if (n == 0) continue;
        const size_t elem = host.inputs[i].bytes() / n;
        const eval::detail::PerturbBlock b = eval::detail::perturb_block(n, round, i);
        const size_t to = b.first * elem, from = b.source * elem, bytes = b.len * elem;
        std::memcpy(static_cast<char*>(host.inputs[i].data()) + to,
                    static_cast<const char*>(donor.inputs[i].data()) + from, bytes);
        for (size_t k = 0; k < timed.size(); ++k) {
          KILN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(timed[k]->at(layouts[k], layouts[k].in[i] + to),
                                                    static_cast<const char*>(donor_device[i].data()) + from, bytes,
                                                    cudaMemcpyDeviceToDevice, device_->stream.get()));
        }
      }
      KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(device_->stream.get()));
      return Status::ok();
    };
    // The candidate's outputs of this round against the reference's of the same round.
    auto compare_round = [&](int64_t round) -> Status {
      TensorSet got = host, expected = host;
      KILN_RETURN_IF_ERROR(timed[0]->download(layouts[0], got, false));
      KILN_RETURN_IF_ERROR(timed[1]->download(layouts[1], expected, false));
      eval::detail::compare_outputs(spec_, got, expected, shape + ", timed round " + std::to_string(round), f_);
      return Status::ok();
    };

    KILN_RETURN_IF_ERROR(place_all(0));
    for (int64_t w = 0; w < opt.warmup_iters; ++w) {
      for (size_t i = 0; i < timed.size(); ++i) {
        KILN_ASSIGN_OR_RETURN(CallOutcome o, call(*timed[i], layouts[i]));
        KILN_ASSIGN_OR_RETURN(bool stop, failed(*timed[i], o, shape + ", warm-up"));
        if (stop) return false;
      }
    }
    KILN_ASSIGN_OR_RETURN(const Overhead overhead_before, call_overhead(cold));

    eval::detail::StoppingRule rule(opt);
    const auto start = std::chrono::steady_clock::now();
    auto elapsed_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    std::string stop_reason;
    std::vector<size_t> block_starts = {0};
    const double block_s = opt.min_time_s / kBlocks;
    double next_block_s = block_s;
    int64_t block_rounds = 0;
    for (int64_t n = 0; stop_reason.empty(); ++n, ++block_rounds) {
      if (block_rounds >= kMinBlockRounds && elapsed_s() >= next_block_s) {
        KILN_RETURN_IF_ERROR(place_all(block_starts.size()));
        block_starts.push_back(static_cast<size_t>(n));
        next_block_s = elapsed_s() + block_s;
        block_rounds = 0;
      }
      KILN_RETURN_IF_ERROR(perturb(static_cast<uint64_t>(n)));
      // Alternate the order inside each round so neither side always runs right after the other.
      for (size_t k = 0; k < timed.size(); ++k) {
        const size_t i = n % 2 == 0 ? timed.size() - 1 - k : k;
        KILN_ASSIGN_OR_RETURN(CallOutcome o, call(*timed[i], layouts[i], cold));
        KILN_ASSIGN_OR_RETURN(bool stop, failed(*timed[i], o, shape + ", timing"));
        if (stop) return false;
        timed[i]->wall_us.push_back(o.us);
        timed[i]->reported_us.push_back(o.reported_us);
        // The stopping rule follows the reported times (the wall clock's noise is mostly the process hop).
        timed[i]->running.add(std::max(o.reported_us - overhead_before.reported_us, o.reported_us * 0.1));
      }
      stop_reason = rule.after_round(n + 1, elapsed_s(), std::max(timed[0]->running.cv(), timed[1]->running.cv()));
      if (!stop_reason.empty() || eval::detail::compare_after_round(static_cast<uint64_t>(n))) {
        KILN_RETURN_IF_ERROR(compare_round(n));
      }
    }
    KILN_ASSIGN_OR_RETURN(const Overhead overhead_after, call_overhead(cold));
    const Overhead overhead{(overhead_before.wall_us + overhead_after.wall_us) / 2,
                            (overhead_before.reported_us + overhead_after.reported_us) / 2};
    // The runners' CUDA events are precise; the candidate's are its own word. When they disagree with the
    // evaluator's clock, everybody is timed on that clock: coarser (the process hop), never in its favour.
    const std::string doubt = disbelief(*timed[0], *timed[1]);
    if (!doubt.empty()) {
      std::fprintf(stderr, "kiln-eval-cuda: %s: %s\n", shape.c_str(), doubt.c_str());
      host_clock_ = true;
    }
    for (Contestant* c : timed) settle_samples(*c, overhead, doubt.empty());
    std::fprintf(stderr,
                 "kiln-eval-cuda: %s: %zu rounds in %zu blocks, call overhead %.2f us subtracted (evaluator's clock "
                 "%.2f us; before/after timing %.2f/%.2f us), stop: %s\n",
                 shape.c_str(), timed[0]->samples_us.size(), block_starts.size(), overhead.reported_us,
                 overhead.wall_us, overhead_before.reported_us, overhead_after.reported_us, stop_reason.c_str());
    std::vector<eval::detail::NamedSamples> baselines;
    for (size_t i = 2; i < timed.size(); ++i) baselines.push_back({timed[i]->name, timed[i]->samples_us});
    timing = eval::detail::summarize_case(dims, timed[0]->samples_us, timed[1]->samples_us, baselines,
                                          options_.bootstrap_seed, opt.warmup_iters, stop_reason, block_starts);
    return true;
  }

  // After timing, the same device buffers get new values: a kernel that caches results by pointer fails.
  Status recheck_after_timing(const task::Dims& dims, TensorSet& host) {
    eval::detail::fill_inputs(spec_, host, eval::detail::kRecheckSeed);
    const std::string context = task::dims_string(dims) + ", after timing";
    const Layout l(host, 0);
    KILN_RETURN_IF_ERROR(reference().upload_inputs(l, host));
    KILN_RETURN_IF_ERROR(reference().upload_outputs(l, poisoned(host, 0)));
    KILN_ASSIGN_OR_RETURN(CallOutcome o, call(reference(), l));
    KILN_RETURN_IF_ERROR(failed(reference(), o, context).status());
    TensorSet expected = host;
    KILN_RETURN_IF_ERROR(reference().download(l, expected, false));

    KILN_RETURN_IF_ERROR(candidate().upload_inputs(l, host));
    KILN_RETURN_IF_ERROR(candidate().upload_outputs(l, poisoned(host, 1)));
    KILN_ASSIGN_OR_RETURN(o, call(candidate(), l));
    KILN_ASSIGN_OR_RETURN(bool stop, failed(candidate(), o, context));
    if (stop) return Status::ok();
    note_descriptors(o, context);
    TensorSet got = host;
    KILN_RETURN_IF_ERROR(candidate().download(l, got, true));
    eval::detail::check_inputs(spec_, got, host, context, f_);
    eval::detail::compare_outputs(spec_, got, expected, context, f_);
    return Status::ok();
  }

  Result<proto::TestReport> run() {
    proto::TestReport report;
    report.correctness.rtol = spec_.rtol;
    report.correctness.atol = spec_.atol;
    report.performance.method = "cuda_events_checked";  // "host_clock" when the candidate's were disbelieved
    report.performance.mode = options_.timing.mode;
    if (const std::string why = candidate_load_failure(); !why.empty()) {
      report.status = proto::test_status::kLoadFailed;
      report.message = "cannot load the kernel: " + why;
      return report;
    }
    KILN_RETURN_IF_ERROR(check_runners_started());
    if (options_.profile_run) return profile_call(std::move(report));
    KILN_RETURN_IF_ERROR(correctness());
    eval::detail::conclude(f_, report);
    if (!report.correctness.passed || !options_.measure) return report;

    std::string speedups;
    for (const auto& dims : spec_.benchmark_cases) {
      const std::string shape = task::dims_string(dims);
      KILN_ASSIGN_OR_RETURN(TensorSet host, eval::detail::allocate(spec_, dims));
      eval::detail::fill_inputs(spec_, host, eval::detail::kTimingSeed);
      proto::CaseTiming timing;
      KILN_ASSIGN_OR_RETURN(bool timed, time_case(dims, host, timing));
      if (!timed) break;
      KILN_RETURN_IF_ERROR(recheck_after_timing(dims, host));
      if (candidate_failed()) break;
      f_.tested(shape);
      speedups += "; speedup " + eval::detail::format_ratio(timing.speedup) + " [" +
                  eval::detail::format_ratio(timing.speedup_lo) + ", " + eval::detail::format_ratio(timing.speedup_hi) +
                  "] on " + shape;
      report.performance.cases.push_back(std::move(timing));
    }
    report.performance.measured = report.performance.cases.size() == spec_.benchmark_cases.size();
    if (host_clock_) report.performance.method = "host_clock";
    eval::detail::conclude(f_, report);
    if (report.correctness.passed) report.message += speedups;
    return report;
  }

  // One call of the candidate on the first benchmark case, for a profiler watching every process: no
  // other contestant runs a kernel, so every kernel in the candidate runner's process is the candidate's.
  Result<proto::TestReport> profile_call(proto::TestReport report) {
    if (spec_.benchmark_cases.empty()) return invalid_argument("profile: the task has no benchmark case");
    const task::Dims& dims = spec_.benchmark_cases.front();
    KILN_ASSIGN_OR_RETURN(TensorSet host, eval::detail::allocate(spec_, dims));
    eval::detail::fill_inputs(spec_, host, eval::detail::kTimingSeed);
    const Layout l(host, 0);
    KILN_RETURN_IF_ERROR(candidate().upload_inputs(l, host));
    KILN_RETURN_IF_ERROR(candidate().upload_outputs(l, poisoned(host, 0)));
    KILN_ASSIGN_OR_RETURN(CallOutcome o, call(candidate(), l));
    report.metadata["profile_pid"] = std::to_string(candidate().runner->pid());
    report.metadata["profile_case"] = task::dims_string(dims);
    if (!o.ok()) {
      report.status = proto::test_status::kCrashed;
      report.message = "profile run: " + o.what();
      return report;
    }
    report.status = proto::test_status::kOk;
    report.message = "profile run on " + task::dims_string(dims);
    return report;
  }

  static Status check_sgemm(const TensorSet& s) {
    const std::string want = "cublas_sgemm: expects fp32 inputs A[M,K], B[K,N] and output C[M,N]";
    if (s.inputs.size() < 2 || s.outputs.empty()) return invalid_argument(want);
    const HostTensor &a = s.inputs[0], &b = s.inputs[1], &c = s.outputs[0];
    for (const HostTensor* t : {&a, &b, &c}) {
      if (t->dtype() != task::DType::kF32 || t->shape().size() != 2) return invalid_argument(want);
      if (t->shape()[0] > INT32_MAX || t->shape()[1] > INT32_MAX) return invalid_argument(want + ": too large");
    }
    if (a.shape()[1] != b.shape()[0] || c.shape()[0] != a.shape()[0] || c.shape()[1] != b.shape()[1]) {
      return invalid_argument(want + ": the shapes do not chain");
    }
    return Status::ok();
  }

 private:
  void note_descriptors(const CallOutcome& o, const std::string& context) {
    if (o.descriptors_changed && f_.changed_descriptor.empty()) {
      f_.changed_descriptor = "the kernel changed a tensor descriptor (" + context + ")";
    }
  }

  const task::TaskSpec& spec_;
  const eval::EvalOptions& options_;
  const Scalars scalars_;
  std::unique_ptr<Device> device_;
  std::vector<Contestant> all_;  // candidate, reference, overhead, then the baselines
  Findings f_;
  bool host_clock_ = false;  // some case was timed by the evaluator's clock
  size_t arenas_ = 1;        // device arenas per contestant
};

Result<proto::TestReport> evaluate_unguarded(const task::TaskSpec& spec, const eval::Candidate& candidate,
                                             const eval::Candidate& reference, const eval::EvalOptions& options) {
  if ((!candidate.entry && candidate.library.empty()) || (!reference.entry && reference.library.empty()))
    return invalid_argument("evaluate: missing kernel entry point");
  if (spec.backend != "cuda") return invalid_argument("this evaluator runs the cuda backend, the task is " + spec.backend);
  for (const auto& b : spec.baselines) {
    if (!is_known_baseline(b)) return invalid_argument("unknown baseline '" + b + "' (known: cublas_sgemm)");
  }
  if (options.timing.mode != "cold" && options.timing.mode != "warm") {
    return invalid_argument("timing mode must be cold or warm, got '" + options.timing.mode + "'");
  }
  Evaluation e(spec, options);
  KILN_RETURN_IF_ERROR(e.start(candidate, reference));
  return e.run();
}

std::string format_uuid(const cudaUUID_t& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char buf[48];
  std::snprintf(buf, sizeof buf, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}

std::string cuda_version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

}  // namespace

bool is_known_baseline(const std::string& name) { return name == "cublas_sgemm"; }

proto::WorkerInfo cuda_worker_info() {
  proto::WorkerInfo w;
  w.backend = "cuda";
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) w.host = host;
  int device = 0, driver = 0, runtime = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) == cudaSuccess && cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
    w.device_name = prop.name;
    w.gpu_uuid = format_uuid(prop.uuid);
  }
  if (cudaDriverGetVersion(&driver) == cudaSuccess) w.driver_version = "CUDA " + cuda_version_text(driver);
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) w.runtime_version = cuda_version_text(runtime);
  // NVML adds the driver's own version, the SM clock and the temperature; without it they stay unknown.
  if (auto nvml = Nvml::load(); nvml.is_ok() && !w.gpu_uuid.empty()) {
    if (auto gpu = (*nvml)->device_by_uuid(w.gpu_uuid); gpu.is_ok()) {
      if (!gpu->driver_version.empty()) w.driver_version = gpu->driver_version;
      if (auto hz = (*nvml)->read(*gpu, GpuSensor::kSmClock); hz.is_ok()) w.clock_hz = *hz;
      if (auto c = (*nvml)->read(*gpu, GpuSensor::kTemperature); c.is_ok()) w.temperature_c = *c;
    }
  }
  return w;
}

Result<proto::TestReport> evaluate(const task::TaskSpec& spec, const eval::Candidate& candidate,
                                   const eval::Candidate& reference, const eval::EvalOptions& options) {
  try {
    return evaluate_unguarded(spec, candidate, reference, options);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("evaluate: out of host memory for the task's tensors");
  } catch (const std::exception& e) {
    return internal_error(std::string("evaluate: ") + e.what());
  }
}

}  // namespace kiln::cuda
