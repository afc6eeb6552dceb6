#include "kiln/cuda/eval.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "kiln/cuda/nvml.h"
#include "kiln/cuda/runtime.h"
#include "kiln/eval/detail/protocol.h"
#include "kiln/eval/detail/tensor.h"
#include "kiln/eval/stats.h"

namespace kiln::cuda {
namespace {

using eval::KernelEntry;
using eval::detail::call_failure;
using eval::detail::Findings;
using eval::detail::HostTensor;
using eval::detail::kMaxListedMismatches;
using eval::detail::Scalars;

// Rounds of an empty timed region (start, device-wide synchronize, stop) whose median is the fixed cost
// that the synchronize adds to every sample; it is subtracted so that short kernels are not flattened.
constexpr int kOverheadRounds = 25;
// The flush buffer is this many times the L2: one pass of writes evicts every line.
constexpr size_t kFlushL2Multiple = 2;
constexpr size_t kFallbackL2Bytes = 64u << 20;

// The host side of one case: shapes, values to upload, and what came back.
struct HostSet {
  std::vector<HostTensor> inputs;
  std::vector<HostTensor> outputs;
};

Result<HostSet> allocate_host(const task::TaskSpec& spec, const task::Dims& dims) {
  HostSet set;
  for (const auto& t : spec.inputs) {
    KILN_ASSIGN_OR_RETURN(auto shape, task::shape_for(t, dims));
    if (shape.size() > KILN_MAX_DIMS) return invalid_argument("tensor '" + t.name + "' has too many dims");
    set.inputs.emplace_back(t.dtype, std::move(shape));
  }
  for (const auto& t : spec.outputs) {
    KILN_ASSIGN_OR_RETURN(auto shape, task::shape_for(t, dims));
    if (shape.size() > KILN_MAX_DIMS) return invalid_argument("tensor '" + t.name + "' has too many dims");
    set.outputs.emplace_back(t.dtype, std::move(shape));
  }
  return set;
}

void fill_inputs(const task::TaskSpec& spec, HostSet& set, uint64_t seed) {
  for (size_t i = 0; i < set.inputs.size(); ++i) {
    const auto& t = spec.inputs[i];
    set.inputs[i].fill(t.init, t.init_a, t.init_b, eval::detail::mix_seed(seed, i));
  }
}

kiln_tensor device_descriptor(const HostTensor& shape_of, void* device_data) {
  kiln_tensor t{};
  t.data = device_data;
  t.dtype = static_cast<int32_t>(shape_of.dtype());
  t.ndim = static_cast<int32_t>(shape_of.shape().size());
  for (size_t d = 0; d < shape_of.shape().size() && d < KILN_MAX_DIMS; ++d) t.shape[d] = shape_of.shape()[d];
  return t;
}

// The device tensors one contestant reads and writes, with the kiln_args that name them. Descriptors are
// restored before every call, so a kernel that scribbles on them cannot affect the next call.
class DeviceSet {
 public:
  static Result<std::unique_ptr<DeviceSet>> create(const HostSet& shapes, const Scalars& scalars, cudaStream_t stream) {
    auto set = std::unique_ptr<DeviceSet>(new DeviceSet());
    for (const auto& t : shapes.inputs) {
      KILN_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::allocate(t.bytes()));
      set->inputs_.push_back(device_descriptor(t, b.data()));
      set->buffers_in_.push_back(std::move(b));
    }
    for (const auto& t : shapes.outputs) {
      KILN_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::allocate(t.bytes()));
      set->outputs_.push_back(device_descriptor(t, b.data()));
      set->buffers_out_.push_back(std::move(b));
    }
    set->live_inputs_ = set->inputs_;
    set->live_outputs_ = set->outputs_;
    kiln_args& a = set->args_;
    a.inputs = set->live_inputs_.data();
    a.n_inputs = static_cast<int32_t>(set->live_inputs_.size());
    a.outputs = set->live_outputs_.data();
    a.n_outputs = static_cast<int32_t>(set->live_outputs_.size());
    a.scalar_names = scalars.names.data();
    a.scalar_values = scalars.values.data();
    a.n_scalars = static_cast<int32_t>(scalars.names.size());
    a.stream = stream;
    return set;
  }

  Status upload_inputs(const HostSet& host) {
    for (size_t i = 0; i < host.inputs.size(); ++i) {
      KILN_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(buffers_in_[i].data(), host.inputs[i].data(), host.inputs[i].bytes(), cudaMemcpyHostToDevice));
    }
    return settle();
  }
  // `poisoned` holds the outputs already poisoned on the host: NaN in the dtype's own encoding.
  Status upload_outputs(const std::vector<HostTensor>& poisoned) {
    for (size_t i = 0; i < poisoned.size(); ++i) {
      KILN_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(buffers_out_[i].data(), poisoned[i].data(), poisoned[i].bytes(), cudaMemcpyHostToDevice));
    }
    return settle();
  }
  // cudaMemcpy from pageable memory may return before its DMA lands, and the kernels run on a non-blocking
  // stream that does not wait for the legacy stream: without this, a kernel can write its outputs before
  // the poison does (seen on the H200 as NaNs in a correct kernel's second call).
  static Status settle() {
    KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    return Status::ok();
  }
  Status download(HostSet& host) const {
    for (size_t i = 0; i < host.inputs.size(); ++i) {
      KILN_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(host.inputs[i].data(), buffers_in_[i].data(), host.inputs[i].bytes(), cudaMemcpyDeviceToHost));
    }
    for (size_t i = 0; i < host.outputs.size(); ++i) {
      KILN_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(host.outputs[i].data(), buffers_out_[i].data(), host.outputs[i].bytes(), cudaMemcpyDeviceToHost));
    }
    return Status::ok();
  }

  void prepare() {
    std::copy(inputs_.begin(), inputs_.end(), live_inputs_.begin());
    std::copy(outputs_.begin(), outputs_.end(), live_outputs_.begin());
  }
  int call(KernelEntry fn) { return fn(&args_); }
  bool descriptors_intact() const {
    auto same = [](const std::vector<kiln_tensor>& a, const std::vector<kiln_tensor>& b) {
      return std::memcmp(a.data(), b.data(), a.size() * sizeof(kiln_tensor)) == 0;
    };
    return same(inputs_, live_inputs_) && same(outputs_, live_outputs_);
  }
  const std::vector<DeviceBuffer>& inputs() const { return buffers_in_; }
  const std::vector<DeviceBuffer>& outputs() const { return buffers_out_; }

 private:
  DeviceSet() = default;
  std::vector<DeviceBuffer> buffers_in_, buffers_out_;
  std::vector<kiln_tensor> inputs_, outputs_, live_inputs_, live_outputs_;
  kiln_args args_{};
};

std::vector<HostTensor> poisoned_outputs(const HostSet& shapes, int variant) {
  std::vector<HostTensor> out = shapes.outputs;
  for (auto& t : out) t.poison(variant);
  return out;
}

// What a call of a kernel did: its return code, and the CUDA error that surfaced when the whole device
// was synchronized after it (its own launch errors, faults of its kernels on any stream).
struct CallOutcome {
  int rc = 0;
  std::string cuda_error;
  bool sticky = false;
  bool ok() const { return rc == 0 && cuda_error.empty(); }
};

CallOutcome call_and_sync(DeviceSet& set, KernelEntry fn) {
  CallOutcome out;
  set.prepare();
  out.rc = set.call(fn);
  cudaError_t launch = cudaGetLastError();
  cudaError_t sync = cudaDeviceSynchronize();
  cudaError_t error = launch != cudaSuccess ? launch : sync;
  if (error != cudaSuccess) {
    out.cuda_error = std::string(cudaGetErrorName(error)) + " (" + cudaGetErrorString(error) + ")";
    out.sticky = is_sticky(error) || is_sticky(sync);
  }
  return out;
}

// Records a failed candidate call; true when the evaluation must stop (always, for a CUDA error: the
// context may be unusable).
bool record_failure(const CallOutcome& o, const std::string& context, Findings& f) {
  if (o.ok()) return false;
  if (!o.cuda_error.empty()) {
    f.failed_call = "CUDA error " + o.cuda_error + " after the candidate's kiln_entry (" + context + ")";
  } else {
    f.failed_call = call_failure(o.rc, context);
  }
  return true;
}

Status reference_failure(const CallOutcome& o, const std::string& context) {
  if (!o.cuda_error.empty()) return internal_error("the reference raised CUDA error " + o.cuda_error + " (" + context + ")");
  return internal_error("the reference's kiln_entry returned " + std::to_string(o.rc) + " (" + context + ")");
}

void check_inputs(const task::TaskSpec& spec, const HostSet& got, const HostSet& pristine, const std::string& context,
                  Findings& f) {
  for (size_t i = 0; i < got.inputs.size(); ++i) {
    if (!got.inputs[i].same_bytes(pristine.inputs[i]) && f.modified_input.empty()) {
      f.modified_input = "input '" + spec.inputs[i].name + "' was modified (" + context + ")";
    }
  }
}

void compare_outputs(const task::TaskSpec& spec, const HostSet& got, const HostSet& expected,
                     const std::string& context, Findings& f) {
  for (size_t i = 0; i < got.outputs.size(); ++i) {
    eval::detail::compare(got.outputs[i], expected.outputs[i], spec.rtol, spec.atol, spec.outputs[i].name, context,
                          kMaxListedMismatches, f.cmp);
  }
}

// Everything the evaluation of one candidate shares: the dedicated stream, timing events, the flush
// buffer and the cuBLAS handle (created on first use).
struct Session {
  Stream stream;
  Event start, stop;
  DeviceBuffer flush;
  cublasHandle_t cublas = nullptr;
  int flush_round = 0;

  ~Session() {
    if (cublas) cublasDestroy(cublas);
  }
  Status flush_l2() {
    // cudaMemsetAsync writes every line of a buffer twice the L2: nothing the kernel reads survives it.
    KILN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(flush.data(), ++flush_round & 0xff, flush.bytes(), stream.get()));
    return Status::ok();
  }
};

Result<std::unique_ptr<Session>> open_session(bool cold) {
  auto s = std::make_unique<Session>();
  KILN_ASSIGN_OR_RETURN(s->stream, Stream::create());
  KILN_ASSIGN_OR_RETURN(s->start, Event::create());
  KILN_ASSIGN_OR_RETURN(s->stop, Event::create());
  if (cold) {
    int device = 0, l2 = 0;
    KILN_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
    KILN_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
    const size_t l2_bytes = l2 > 0 ? static_cast<size_t>(l2) : kFallbackL2Bytes;
    KILN_ASSIGN_OR_RETURN(s->flush, DeviceBuffer::allocate(kFlushL2Multiple * l2_bytes));
  }
  return s;
}

// --- baselines -------------------------------------------------------------------------------------------

// C[M,N] = A[M,K] * B[K,N], row-major fp32, through cuBLAS (column-major): C^T = B^T * A^T, so cuBLAS
// computes an N x M column-major product of B (N x K, ld N) and A (K x M, ld K) into C (ld N).
Status check_sgemm(const HostSet& s) {
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

Status run_sgemm(Session& session, const HostSet& shapes, DeviceSet& set) {
  if (!session.cublas) {
    if (cublasCreate(&session.cublas) != CUBLAS_STATUS_SUCCESS) return internal_error("cublasCreate failed");
    if (cublasSetStream(session.cublas, session.stream.get()) != CUBLAS_STATUS_SUCCESS) {
      return internal_error("cublasSetStream failed");
    }
  }
  const int m = static_cast<int>(shapes.inputs[0].shape()[0]);
  const int k = static_cast<int>(shapes.inputs[0].shape()[1]);
  const int n = static_cast<int>(shapes.inputs[1].shape()[1]);
  const float one = 1.0f, zero = 0.0f;
  cublasStatus_t st = cublasSgemm(session.cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one,
                                  static_cast<const float*>(set.inputs()[1].data()), n,
                                  static_cast<const float*>(set.inputs()[0].data()), k, &zero,
                                  static_cast<float*>(set.outputs()[0].data()), n);
  if (st != CUBLAS_STATUS_SUCCESS) return internal_error("cublasSgemm failed with status " + std::to_string(st));
  return Status::ok();
}

struct Baseline {
  const char* name;
  Status (*check)(const HostSet& shapes);
  Status (*run)(Session& session, const HostSet& shapes, DeviceSet& set);
};

constexpr Baseline kBaselines[] = {
    {"cublas_sgemm", check_sgemm, run_sgemm},
};

const Baseline* find_baseline(const std::string& name) {
  for (const Baseline& b : kBaselines) {
    if (name == b.name) return &b;
  }
  return nullptr;
}

// --- correctness -----------------------------------------------------------------------------------------

// DESIGN §5 correctness for one case and seed; an error only for a failing reference or device trouble.
Status check_case(const task::TaskSpec& spec, KernelEntry candidate, KernelEntry reference, const Scalars& scalars,
                  Session& session, const HostSet& pristine, const std::string& context, Findings& f) {
  KILN_ASSIGN_OR_RETURN(auto cand, DeviceSet::create(pristine, scalars, session.stream.get()));
  KILN_ASSIGN_OR_RETURN(auto ref, DeviceSet::create(pristine, scalars, session.stream.get()));
  const std::vector<HostTensor> poison0 = poisoned_outputs(pristine, 0);
  const std::vector<HostTensor> poison1 = poisoned_outputs(pristine, 1);
  KILN_RETURN_IF_ERROR(cand->upload_inputs(pristine));
  KILN_RETURN_IF_ERROR(cand->upload_outputs(poison0));
  KILN_RETURN_IF_ERROR(ref->upload_inputs(pristine));
  KILN_RETURN_IF_ERROR(ref->upload_outputs(poison0));

  CallOutcome o = call_and_sync(*cand, candidate);
  if (record_failure(o, context, f)) return Status::ok();
  HostSet first = pristine;
  KILN_RETURN_IF_ERROR(cand->download(first));
  if (!cand->descriptors_intact() && f.changed_descriptor.empty()) {
    f.changed_descriptor = "the kernel changed a tensor descriptor (" + context + ")";
  }
  check_inputs(spec, first, pristine, context, f);

  o = call_and_sync(*ref, reference);
  if (!o.ok()) return reference_failure(o, context);
  HostSet expected = pristine;
  KILN_RETURN_IF_ERROR(ref->download(expected));

  // The second call gets fresh inputs and outputs poisoned again: a kernel that leans on what the first call
  // left in device memory fails here.
  KILN_RETURN_IF_ERROR(cand->upload_inputs(pristine));
  KILN_RETURN_IF_ERROR(cand->upload_outputs(poison1));
  o = call_and_sync(*cand, candidate);
  if (record_failure(o, context + ", second call", f)) return Status::ok();
  HostSet second = pristine;
  KILN_RETURN_IF_ERROR(cand->download(second));
  check_inputs(spec, second, pristine, context + ", second call", f);

  compare_outputs(spec, first, expected, context, f);
  compare_outputs(spec, second, expected, context + ", second call", f);
  return Status::ok();
}

// --- timing ----------------------------------------------------------------------------------------------

struct Contestant {
  std::string name;
  KernelEntry entry = nullptr;
  const Baseline* baseline = nullptr;
  std::vector<double> samples_us;
  eval::RunningStats running;
};

using Clock = std::chrono::steady_clock;

struct TimingOutcome {
  proto::CaseTiming timing;
  std::string failed_call;
};

// One timed call: [flush] start; call; device-wide synchronize; stop. The synchronize makes work a kernel
// left on any other stream part of its time; its fixed cost is measured and subtracted by the caller.
Result<double> timed_call(Session& s, bool cold, const std::function<CallOutcome()>& call, CallOutcome& outcome) {
  if (cold) KILN_RETURN_IF_ERROR(s.flush_l2());
  KILN_CUDA_RETURN_IF_ERROR(cudaEventRecord(s.start.get(), s.stream.get()));
  outcome = call();
  if (!outcome.ok()) return 0.0;
  KILN_CUDA_RETURN_IF_ERROR(cudaEventRecord(s.stop.get(), s.stream.get()));
  KILN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(s.stop.get()));
  float ms = 0;
  KILN_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, s.start.get(), s.stop.get()));
  return static_cast<double>(ms) * 1e3;
}

Result<double> sync_overhead_us(Session& s) {
  std::vector<double> rounds;
  CallOutcome outcome;
  auto empty = [] {
    CallOutcome o;
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) o.cuda_error = cudaGetErrorName(e);
    return o;
  };
  for (int i = 0; i < kOverheadRounds; ++i) {
    KILN_ASSIGN_OR_RETURN(double us, timed_call(s, false, empty, outcome));
    if (!outcome.ok()) return internal_error("synchronize failed: " + outcome.cuda_error);
    rounds.push_back(us);
  }
  std::sort(rounds.begin(), rounds.end());
  return eval::quantile_sorted(rounds, 0.5);
}

Result<TimingOutcome> time_case(const task::TaskSpec& spec, KernelEntry candidate, KernelEntry reference,
                                const Scalars& scalars, const task::Dims& dims, const eval::EvalOptions& options,
                                Session& session, const HostSet& inputs) {
  const eval::TimingOptions& opt = options.timing;
  const bool cold = opt.mode == "cold";
  const std::string shape = task::dims_string(dims);
  std::vector<Contestant> all;
  all.push_back({"candidate", candidate, nullptr, {}, {}});
  all.push_back({"reference", reference, nullptr, {}, {}});
  for (const auto& name : spec.baselines) {
    const Baseline* b = find_baseline(name);
    if (!b) return invalid_argument("unknown baseline '" + name + "'");
    KILN_RETURN_IF_ERROR(b->check(inputs).with_context("case " + shape));
    all.push_back({name, nullptr, b, {}, {}});
  }
  // One set of device tensors per contestant, all with the same inputs. Contestants rotate over them round
  // by round: where a buffer sits in memory can change a memory-bound kernel's time by about a percent,
  // and that must not be charged to one side (an A/A run would otherwise not contain 1.0).
  const std::vector<HostTensor> poison = poisoned_outputs(inputs, 0);
  std::vector<std::unique_ptr<DeviceSet>> sets;
  for (size_t i = 0; i < all.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(auto set, DeviceSet::create(inputs, scalars, session.stream.get()));
    KILN_RETURN_IF_ERROR(set->upload_inputs(inputs));
    KILN_RETURN_IF_ERROR(set->upload_outputs(poison));
    sets.push_back(std::move(set));
  }

  TimingOutcome out;
  auto caller = [&](Contestant& c, DeviceSet& set) {
    return [&]() -> CallOutcome {
      if (!c.baseline) return call_and_sync(set, c.entry);
      CallOutcome o;
      Status st = c.baseline->run(session, inputs, set);
      if (!st.is_ok()) o.cuda_error = st.message();
      cudaError_t e = cudaDeviceSynchronize();
      if (o.cuda_error.empty() && e != cudaSuccess) o.cuda_error = cudaGetErrorName(e);
      return o;
    };
  };
  auto failure = [&](Contestant& c, const CallOutcome& o, const std::string& where) -> Status {
    if (&c == &all[0]) {
      Findings f;
      record_failure(o, shape + ", " + where, f);
      out.failed_call = f.failed_call;
      return Status::ok();
    }
    if (c.baseline) return internal_error("baseline " + c.name + " failed: " + o.cuda_error + " (" + shape + ")");
    return reference_failure(o, shape + ", " + where);
  };

  for (int64_t w = 0; w < opt.warmup_iters; ++w) {
    for (size_t i = 0; i < all.size(); ++i) {
      Contestant& c = all[i];
      CallOutcome o = caller(c, *sets[(i + static_cast<size_t>(w)) % sets.size()])();
      if (!o.ok()) {
        KILN_RETURN_IF_ERROR(failure(c, o, "warm-up"));
        return out;
      }
    }
  }
  KILN_ASSIGN_OR_RETURN(const double overhead_us, sync_overhead_us(session));

  eval::detail::StoppingRule rule(opt);
  const auto start = Clock::now();
  std::string stop_reason;
  for (int64_t n = 0; stop_reason.empty(); ++n) {
    // Alternate the order inside each round so neither side always runs right after the other.
    for (size_t k = 0; k < all.size(); ++k) {
      const size_t i = n % 2 == 0 ? all.size() - 1 - k : k;
      Contestant& c = all[i];
      DeviceSet& set = *sets[(i + static_cast<size_t>(n)) % sets.size()];
      CallOutcome o;
      KILN_ASSIGN_OR_RETURN(double us, timed_call(session, cold, caller(c, set), o));
      if (!o.ok()) {
        KILN_RETURN_IF_ERROR(failure(c, o, "timing"));
        return out;
      }
      // Never below a tenth of the raw time: the subtraction corrects a bias, it must not invent speed.
      us = std::max(us - overhead_us, us * 0.1);
      c.samples_us.push_back(us);
      c.running.add(us);
    }
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    stop_reason = rule.after_round(n + 1, elapsed, std::max(all[0].running.cv(), all[1].running.cv()));
  }
  std::fprintf(stderr, "kiln-eval-cuda: %s: %zu rounds, synchronize overhead %.2f us subtracted, stop: %s\n",
               shape.c_str(), all[0].samples_us.size(), overhead_us, stop_reason.c_str());

  std::vector<eval::detail::NamedSamples> baselines;
  for (size_t i = 2; i < all.size(); ++i) baselines.push_back({all[i].name, all[i].samples_us});
  out.timing = eval::detail::summarize_case(dims, all[0].samples_us, all[1].samples_us, baselines,
                                            options.bootstrap_seed, opt.warmup_iters, stop_reason);
  return out;
}

// After timing, the same device buffers get new values: a kernel that caches results by pointer fails.
Status recheck_after_timing(const task::TaskSpec& spec, KernelEntry candidate, KernelEntry reference,
                            const Scalars& scalars, Session& session, const std::string& shape, HostSet& host,
                            DeviceSet& cand_set, Findings& f) {
  fill_inputs(spec, host, eval::detail::kRecheckSeed);
  const std::string context = shape + ", after timing";
  KILN_ASSIGN_OR_RETURN(auto ref, DeviceSet::create(host, scalars, session.stream.get()));
  KILN_RETURN_IF_ERROR(ref->upload_inputs(host));
  KILN_RETURN_IF_ERROR(ref->upload_outputs(poisoned_outputs(host, 0)));
  CallOutcome o = call_and_sync(*ref, reference);
  if (!o.ok()) return reference_failure(o, context);
  HostSet expected = host;
  KILN_RETURN_IF_ERROR(ref->download(expected));
  ref.reset();

  KILN_RETURN_IF_ERROR(cand_set.upload_inputs(host));
  KILN_RETURN_IF_ERROR(cand_set.upload_outputs(poisoned_outputs(host, 1)));
  o = call_and_sync(cand_set, candidate);
  if (record_failure(o, context, f)) return Status::ok();
  HostSet got = host;
  KILN_RETURN_IF_ERROR(cand_set.download(got));
  check_inputs(spec, got, host, context, f);
  compare_outputs(spec, got, expected, context, f);
  return Status::ok();
}

Result<proto::TestReport> evaluate_unguarded(const task::TaskSpec& spec, KernelEntry candidate,
                                             KernelEntry reference, const eval::EvalOptions& options) {
  if (!candidate || !reference) return invalid_argument("evaluate: missing kernel entry point");
  if (spec.backend != "cuda") return invalid_argument("this evaluator runs the cuda backend, the task is " + spec.backend);
  for (const auto& b : spec.baselines) {
    if (!find_baseline(b)) return invalid_argument("unknown baseline '" + b + "' (known: cublas_sgemm)");
  }
  if (options.timing.mode != "cold" && options.timing.mode != "warm") {
    return invalid_argument("timing mode must be cold or warm, got '" + options.timing.mode + "'");
  }
  int devices = 0;
  KILN_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&devices));
  if (devices == 0) return failed_precondition("no CUDA device is visible");
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, open_session(options.timing.mode == "cold"));

  const Scalars scalars(spec);
  proto::TestReport report;
  report.correctness.rtol = spec.rtol;
  report.correctness.atol = spec.atol;
  report.performance.method = "cuda_events";
  report.performance.mode = options.timing.mode;

  Findings f;
  for (const auto& dims : spec.correctness_cases) {
    const std::string shape = task::dims_string(dims);
    KILN_ASSIGN_OR_RETURN(HostSet pristine, allocate_host(spec, dims));
    f.tested(shape);
    for (int64_t seed = 0; seed < spec.seeds && f.failed_call.empty(); ++seed) {
      fill_inputs(spec, pristine, static_cast<uint64_t>(seed));
      KILN_RETURN_IF_ERROR(check_case(spec, candidate, reference, scalars, *session, pristine,
                                      shape + " seed " + std::to_string(seed), f));
    }
    if (!f.failed_call.empty()) break;
  }
  eval::detail::conclude(f, report);
  if (!report.correctness.passed || !options.measure) return report;

  std::string speedups;
  for (const auto& dims : spec.benchmark_cases) {
    const std::string shape = task::dims_string(dims);
    KILN_ASSIGN_OR_RETURN(HostSet host, allocate_host(spec, dims));
    fill_inputs(spec, host, eval::detail::kTimingSeed);
    KILN_ASSIGN_OR_RETURN(TimingOutcome timed,
                          time_case(spec, candidate, reference, scalars, dims, options, *session, host));
    if (!timed.failed_call.empty()) {
      f.failed_call = timed.failed_call;
      break;
    }
    KILN_ASSIGN_OR_RETURN(auto cand_set, DeviceSet::create(host, scalars, session->stream.get()));
    KILN_RETURN_IF_ERROR(recheck_after_timing(spec, candidate, reference, scalars, *session, shape, host, *cand_set, f));
    if (!f.failed_call.empty()) break;
    f.tested(shape);
    speedups += "; speedup " + eval::detail::format_ratio(timed.timing.speedup) + " [" +
                eval::detail::format_ratio(timed.timing.speedup_lo) + ", " +
                eval::detail::format_ratio(timed.timing.speedup_hi) + "] on " + shape;
    report.performance.cases.push_back(std::move(timed.timing));
  }
  report.performance.measured = report.performance.cases.size() == spec.benchmark_cases.size();
  eval::detail::conclude(f, report);
  if (report.correctness.passed) report.message += speedups;
  return report;
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

bool is_known_baseline(const std::string& name) { return find_baseline(name) != nullptr; }

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

Result<proto::TestReport> evaluate(const task::TaskSpec& spec, KernelEntry candidate, KernelEntry reference,
                                   const eval::EvalOptions& options) {
  try {
    return evaluate_unguarded(spec, candidate, reference, options);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("evaluate: out of host memory for the task's tensors");
  } catch (const std::exception& e) {
    return internal_error(std::string("evaluate: ") + e.what());
  }
}

}  // namespace kiln::cuda
