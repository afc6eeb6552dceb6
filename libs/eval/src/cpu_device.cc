#include "cpu_device.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

#include "baselines.h"
#include "kiln/eval/host.h"
#include "kiln/eval/torch_module.h"

namespace kiln::eval {

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

  kiln_args& prepare() {
    std::copy(inputs_.begin(), inputs_.end(), live_inputs_.begin());
    std::copy(outputs_.begin(), outputs_.end(), live_outputs_.begin());
    return args_;
  }
  kiln_args& args() { return args_; }
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

// Cold mode: no tensor of the call is in any cache when it starts. The lines stage() wrote into the
// runner's arena are evicted one by one (clflush, dc civac): every cache level of every core, about 1 ms
// for 3 MiB. Where the CPU cannot, a buffer 1.5 times the last-level cache is written and read instead,
// which evicts only what the evaluator's core shares and costs a pass over that buffer per call; it is not
// inherited by the runners forked for each timing block (MADV_DONTFORK): shared copy-on-write, every
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

CpuDevice::CpuDevice(const task::TaskSpec& spec, const EvalOptions& options) : scalars_(spec) {
  if (options.timing.mode == "cold") flusher_ = std::make_unique<CacheFlusher>();
}

CpuDevice::~CpuDevice() = default;

Result<std::unique_ptr<CpuDevice>> CpuDevice::start(const task::TaskSpec& spec, const Candidate& candidate,
                                                    KernelEntry reference, const EvalOptions& options) {
  std::unique_ptr<CpuDevice> d(new CpuDevice(spec, options));
  d->kernels_ = {{"candidate", candidate.entry, candidate.library, nullptr, nullptr}};
  if (spec.torch_reference()) {
    KILN_ASSIGN_OR_RETURN(RunnerKernel k, torch_kernel(spec, options.python, {"reference", false, "cpu", 0}));
    d->kernels_.push_back(std::move(k));
  } else {
    d->kernels_.push_back({"reference", reference, "", nullptr, nullptr});
  }
  for (const auto& b : spec.baselines) {
    if (is_torch_baseline(b)) {
      KILN_ASSIGN_OR_RETURN(RunnerKernel k, torch_kernel(spec, options.python, {b, b == kTorchCompile, "cpu", 0}));
      d->kernels_.push_back(std::move(k));
    } else {
      d->kernels_.push_back({b, nullptr, "", detail::find_baseline(b), nullptr});
    }
  }
  KILN_ASSIGN_OR_RETURN(const size_t arena, arena_bytes_for(spec));
  // Timing blocks after the first run on fresh runner processes: an offset fixed for one process shows
  // as spread between blocks. The first block and the check after timing use the runners that ran
  // correctness, so call-count and time bombs still fire.
  // A Python contestant (trusted: the reference or a baseline) keeps its process: starting one imports
  // torch, seconds, and the offsets of one process are what it would show a user too.
  std::vector<RunnerKernel> fresh;
  for (const auto& k : d->kernels_)
    if (!k.python) fresh.push_back(k);
  d->start_runners_ = [fresh, arena, wipe = options.wipe_in_runners] { return Runner::start(fresh, arena, wipe); };
  KILN_ASSIGN_OR_RETURN(d->runners_, Runner::start(d->kernels_, arena, options.wipe_in_runners));
  for (const auto& r : d->runners_) {
    d->names_.push_back(r->name());
    d->current_.push_back(r.get());
  }
  d->slots_.resize(d->runners_.size());
  return d;
}

std::string CpuDevice::candidate_load_failure() const {
  const RunnerDeath* d = runners_[0]->death();
  return d && d->load_failed ? d->what : std::string();
}

// Any death before a call other than the candidate's load failure is the runner's own set-up
// (confinement), not the kernel's.
Status CpuDevice::check_started() const {
  for (const auto& r : runners_) {
    if (const RunnerDeath* d = r->death()) return internal_error("the " + r->name() + " runner: " + d->what);
  }
  return Status::ok();
}

void CpuDevice::install(size_t who, TensorSet tensors) {
  Slot& s = slots_[who];
  s.invoker.reset();
  s.tensors = std::move(tensors);
  s.invoker = std::make_unique<Invoker>(s.tensors, scalars_);
}

Status CpuDevice::load(size_t who, const TensorSet& tensors) {
  install(who, tensors);
  return Status::ok();
}

Status CpuDevice::read(size_t who, TensorSet& into, bool inputs_too) {
  const TensorSet& from = slots_[who].tensors;
  for (size_t i = 0; inputs_too && i < into.inputs.size(); ++i) into.inputs[i].copy_from(from.inputs[i]);
  for (size_t i = 0; i < into.outputs.size(); ++i) into.outputs[i].copy_from(from.outputs[i]);
  return Status::ok();
}

Result<bool> CpuDevice::compare_outputs(size_t got, size_t expected, double rtol, double atol,
                                        std::vector<Comparison>& per_output) {
  const TensorSet& g = slots_[got].tensors;
  const TensorSet& e = slots_[expected].tensors;
  if (g.outputs.size() != e.outputs.size()) return internal_error("CpuDevice: the contestants' outputs differ");
  per_output.assign(g.outputs.size(), Comparison{});
  for (size_t i = 0; i < g.outputs.size(); ++i)
    compare(g.outputs[i], e.outputs[i], rtol, atol, "", "", 0, per_output[i]);
  return true;
}

// The tensors go to the runner's arena, the caches are flushed (cold mode, timed calls only: a warm-up
// pages in code and arenas, its time is thrown away), the runner is continued, and the clock covers the
// call (Runner says exactly what); then the runner is stopped and the tensors come back.
Result<Device::Call> CpuDevice::call(size_t who, CallKind kind) {
  Slot& s = slots_[who];
  if (!s.invoker) return internal_error("CpuDevice: call before load");
  Runner& runner = *current_[who];
  KILN_RETURN_IF_ERROR(runner.stage(s.invoker->prepare()));
  if (flusher_ && kind == CallKind::kTimed) flusher_->before_call(runner);
  double us = 0;
  Result<int> rc = runner.invoke(&us);
  if (rc.is_ok()) {
    if (Status st = runner.freeze(); !st.is_ok()) rc = st;
  }
  Call c;
  if (!rc.is_ok()) {
    if (!runner.death()) return rc.status();
    c.death = runner.death()->what;
    return c;
  }
  runner.unstage(s.invoker->args());
  c.rc = *rc;
  c.descriptors_changed = !s.invoker->descriptors_intact();
  // A thread the kernel left working after it returned ran on until the runner stopped: that CPU time is
  // the call's too. A Python contestant (trusted code) is timed by its own clock around forward(): the
  // wrapping of the arena's tensors and the copy into the output are Kiln's, not the module's.
  c.sample_us = (runner.python() ? runner.reported_us() : us) + runner.after_return_cpu_us();
  if (runner.python() && c.rc != 0) c.device_error = runner.device_error();
  return c;
}

Status CpuDevice::check_case(const TensorSet& shapes) {
  for (size_t i = 2; i < kernels_.size(); ++i) {
    if (kernels_[i].baseline) KILN_RETURN_IF_ERROR(kernels_[i].baseline->check(shapes.inputs, shapes.outputs));
  }
  return Status::ok();
}

Status CpuDevice::begin_timing(const task::TaskSpec& spec, const TensorSet& shapes, uint64_t first_seed,
                               uint64_t donor_seed) {
  timing_.draw(spec, shapes, first_seed, donor_seed);
  return Status::ok();
}

Status CpuDevice::load_block(size_t who, const TensorSet& /*shapes*/) { return load(who, timing_.first); }

Result<Device::Block> CpuDevice::begin_block(uint64_t block) {
  Block b;
  if (block > 0) {
    KILN_ASSIGN_OR_RETURN(Runner::Runners fresh, start_runners_());
    for (size_t i = 0; i < fresh.size(); ++i) {
      if (const RunnerDeath* d = fresh[i]->death()) {
        if (i != 0) return internal_error("the " + fresh[i]->name() + " runner: " + d->what);
        b.candidate_death = d->what;
        return b;
      }
    }
    generation_ = std::move(fresh);
    for (size_t i = 0, next = 0; i < current_.size(); ++i)
      current_[i] = runners_[i]->python() ? runners_[i].get() : generation_[next++].get();
    b.fresh = true;
  }
  // Other pages and cache sets for every contestant in every block.
  for (size_t i = 0; i < current_.size(); ++i) {
    const uint64_t draw = mix_seed(mix_seed(kTimingSeed + 3, block), i);
    current_[i]->set_placement(draw % (kPlacementSlack / 64) * 64);
  }
  return b;
}

Status CpuDevice::perturb(size_t who, const std::vector<PerturbBlock>& blocks) {
  timing_.perturb(who == kOwnCopy ? timing_.first : slots_[who].tensors, blocks);
  return Status::ok();
}

Status CpuDevice::end_timing(std::vector<std::vector<double>>& /*samples*/, std::string& /*note*/) {
  for (size_t i = 0; i < runners_.size(); ++i) {
    runners_[i]->set_placement(0);
    current_[i] = runners_[i].get();
  }
  generation_.clear();
  timing_.first = TensorSet{};
  return Status::ok();
}

Status CpuDevice::load_donor(size_t who, const TensorSet& shapes, int variant) {
  install(who, timing_.donor_set(shapes, variant));
  return Status::ok();
}

Result<bool> CpuDevice::inputs_are_donor(size_t who) {
  const TensorSet& s = slots_[who].tensors;
  for (size_t i = 0; i < s.inputs.size() && i < timing_.donor.inputs.size(); ++i) {
    if (!s.inputs[i].same_bytes(timing_.donor.inputs[i])) return false;
  }
  return true;
}

Status CpuDevice::read_donor(TensorSet& into) {
  for (size_t i = 0; i < into.inputs.size() && i < timing_.donor.inputs.size(); ++i) {
    into.inputs[i].copy_from(timing_.donor.inputs[i]);
  }
  return Status::ok();
}

}  // namespace kiln::eval
