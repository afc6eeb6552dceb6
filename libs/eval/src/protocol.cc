#include "kiln/eval/detail/protocol.h"

#include "kiln/eval/device.h"

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <map>

#include "kiln/eval/stats.h"

namespace kiln::eval {
namespace {

// The noise "stops improving" when this many checkpoints in a row fail to lower it by kMinImprovement.
constexpr int kStallCheckpoints = 5;
constexpr double kMinImprovement = 0.02;
// A guard on memory for very fast kernels; reaching it counts as a stall.
constexpr int64_t kMaxSamples = int64_t{1} << 20;

constexpr size_t kPerturbMinElements = 16;
constexpr size_t kPerturbFraction = 100;
constexpr uint64_t kCheckEveryRounds = 4;

// Block b's samples (`block_starts` empty: all of them as block 0); none where the block has none.
std::vector<double> block_samples(const std::vector<double>& samples_us, const std::vector<size_t>& block_starts,
                                  size_t b) {
  const size_t begin = std::min(block_starts.empty() ? 0 : block_starts[b], samples_us.size());
  const size_t end = std::min(b + 1 < block_starts.size() ? block_starts[b + 1] : samples_us.size(), samples_us.size());
  if (begin >= end) return {};
  return {samples_us.begin() + static_cast<std::ptrdiff_t>(begin),
          samples_us.begin() + static_cast<std::ptrdiff_t>(end)};
}

}  // namespace

Result<TensorSet> allocate(const task::TaskSpec& spec, const task::Dims& dims) {
  TensorSet set;
  for (const auto* list : {&spec.inputs, &spec.outputs}) {
    for (const auto& t : *list) {
      KILN_ASSIGN_OR_RETURN(std::vector<int64_t> shape, task::shape_for(t, dims));
      if (shape.size() > KILN_MAX_DIMS) {
        return invalid_argument("tensor '" + t.name + "' has more than " + std::to_string(KILN_MAX_DIMS) + " dims");
      }
      (list == &spec.inputs ? set.inputs : set.outputs).emplace_back(t.dtype, std::move(shape));
    }
  }
  return set;
}

Result<size_t> largest_case_bytes(const task::TaskSpec& spec, size_t alignment) {
  size_t most = 0;
  for (const auto* cases : {&spec.correctness_cases, &spec.benchmark_cases}) {
    for (const auto& dims : *cases) {
      size_t bytes = 0;
      for (const auto* list : {&spec.inputs, &spec.outputs}) {
        for (const auto& t : *list) {
          KILN_ASSIGN_OR_RETURN(std::vector<int64_t> shape, task::shape_for(t, dims));
          size_t n = task::dtype_bytes(t.dtype);
          for (int64_t d : shape) n *= static_cast<size_t>(std::max<int64_t>(d, 0));
          bytes += (std::max<size_t>(n, 1) + alignment - 1) / alignment * alignment;
        }
      }
      most = std::max(most, bytes);
    }
  }
  return most;
}

void fill_inputs(const task::TaskSpec& spec, TensorSet& set, uint64_t seed) {
  for (size_t i = 0; i < set.inputs.size(); ++i) {
    const auto& t = spec.inputs[i];
    set.inputs[i].fill(t.init, t.init_a, t.init_b, mix_seed(seed, i));
  }
}

void poison_outputs(TensorSet& set, int variant) {
  for (auto& o : set.outputs) o.poison(variant);
}

std::vector<HostTensor> unfilled_like(const std::vector<HostTensor>& tensors) {
  std::vector<HostTensor> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.emplace_back(t.dtype(), t.shape());
  return out;
}

TensorSet unfilled_like(const TensorSet& set) { return {unfilled_like(set.inputs), unfilled_like(set.outputs)}; }

void HostTimingSets::draw(const task::TaskSpec& spec, const TensorSet& shapes, uint64_t first_seed,
                          uint64_t donor_seed) {
  first = unfilled_like(shapes);
  fill_inputs(spec, first, first_seed);
  poison_outputs(first, 0);
  donor.outputs.clear();
  donor.inputs = unfilled_like(shapes.inputs);
  fill_inputs(spec, donor, donor_seed);
}

void HostTimingSets::perturb(TensorSet& set, const std::vector<PerturbBlock>& blocks) const {
  for (size_t i = 0; i < blocks.size() && i < donor.inputs.size() && i < set.inputs.size(); ++i) {
    const size_t n = donor.inputs[i].elements();
    if (n == 0 || blocks[i].len == 0) continue;
    const size_t elem = donor.inputs[i].bytes() / n;
    std::memcpy(static_cast<char*>(set.inputs[i].data()) + blocks[i].first * elem,
                static_cast<const char*>(donor.inputs[i].data()) + blocks[i].source * elem, blocks[i].len * elem);
  }
}

TensorSet HostTimingSets::donor_set(const TensorSet& shapes, int variant) const {
  TensorSet set = unfilled_like(shapes);
  for (size_t i = 0; i < set.inputs.size(); ++i) set.inputs[i].copy_from(donor.inputs[i]);
  poison_outputs(set, variant);
  return set;
}

PerturbBlock perturb_block(size_t elements, uint64_t round, size_t input) {
  if (elements == 0) return {};
  const size_t len = std::min(elements, std::max<size_t>(kPerturbMinElements, elements / kPerturbFraction));
  const uint64_t draw = mix_seed(mix_seed(kTimingSeed, round), input);
  return {draw % (elements - len + 1), len, mix_seed(draw, 1) % (elements - len + 1)};
}

Scalars::Scalars(const task::TaskSpec& spec) {
  for (const auto& [name, value] : spec.scalars) {
    names.push_back(name.c_str());
    values.push_back(value);
  }
}

namespace detail {

bool compare_after_round(uint64_t round) { return mix_seed(kTimingSeed + 2, round) % kCheckEveryRounds == 0; }

void compare_outputs(const task::TaskSpec& spec, const TensorSet& got, const TensorSet& expected,
                     const std::string& context, Findings& f) {
  for (size_t i = 0; i < got.outputs.size(); ++i) {
    compare(got.outputs[i], expected.outputs[i], spec.rtol, spec.atol, spec.outputs[i].name, context,
            kMaxListedMismatches, f.cmp);
  }
}

bool all_match(const std::vector<Comparison>& per_output) {
  for (const Comparison& c : per_output) {
    if (c.mismatches != 0 || c.nonfinite != 0) return false;
  }
  return true;
}

void check_inputs(const task::TaskSpec& spec, const TensorSet& got, const TensorSet& pristine,
                  const std::string& context, Findings& f) {
  for (size_t i = 0; i < got.inputs.size(); ++i) {
    if (!got.inputs[i].same_bytes(pristine.inputs[i]) && f.modified_input.empty()) {
      f.modified_input = "input '" + spec.inputs[i].name + "' was modified (" + context + ")";
    }
  }
}

void Findings::tested(const std::string& shape) {
  if (std::find(tested_shapes.begin(), tested_shapes.end(), shape) == tested_shapes.end()) {
    tested_shapes.push_back(shape);
  }
}

std::string call_failure(int rc, const std::string& context) {
  return "kiln_entry returned " + std::to_string(rc) + " (" + context + ")";
}

std::string format_ratio(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3gx", x);
  return buf;
}

void conclude(const Findings& f, proto::TestReport& report) {
  auto first = [&](const std::string& lead) {
    return f.cmp.first_mismatches.empty() ? lead : lead + "; first: " + f.cmp.first_mismatches.front();
  };
  if (!f.crashed.empty()) {
    report.status = proto::TestStatus::kCrashed;
    report.message = "crashed: " + f.crashed;
  } else if (!f.failed_call.empty()) {
    report.status = proto::TestStatus::kCrashed;
    report.message = "failed: " + f.failed_call;
  } else if (!f.changed_descriptor.empty()) {
    report.status = proto::TestStatus::kWrongShape;
    report.message = f.changed_descriptor;
  } else if (f.cmp.nonfinite > 0) {
    report.status = proto::TestStatus::kNonFinite;
    report.message = first(std::to_string(f.cmp.nonfinite) + " non-finite outputs where the reference is finite");
  } else if (!f.modified_input.empty()) {
    report.status = proto::TestStatus::kInputModified;
    report.message = f.modified_input;
  } else if (f.cmp.mismatches > 0) {
    report.status = proto::TestStatus::kMismatch;
    report.message = first(std::to_string(f.cmp.mismatches) + " outputs differ from the reference");
  } else {
    report.status = proto::TestStatus::kOk;
    report.message = "correct on " + std::to_string(f.tested_shapes.size()) + " shapes";
  }
  proto::Correctness& c = report.correctness;
  c.passed = report.status == proto::TestStatus::kOk;
  c.max_abs_error = f.cmp.max_abs_error;
  c.max_rel_error = f.cmp.max_rel_error;
  c.mismatches = f.cmp.mismatches;
  c.tested_shapes = f.tested_shapes;
  c.first_mismatches = f.cmp.first_mismatches;
}

StoppingRule::StoppingRule(const TimingOptions& options)
    : options_(options),
      checkpoint_s_(std::clamp(options.min_time_s / 4, 0.005, 0.25)),
      next_checkpoint_s_(checkpoint_s_) {}

std::string StoppingRule::after_round(int64_t rounds, double elapsed_s, double noise) {
  if (elapsed_s >= options_.max_time_s) return "max_time";
  if (rounds >= kMaxSamples) return "stalled";
  if (elapsed_s < next_checkpoint_s_ || rounds < next_checkpoint_rounds_) return {};
  next_checkpoint_s_ = elapsed_s + checkpoint_s_;
  next_checkpoint_rounds_ = rounds + std::max<int64_t>(options_.min_samples, 1);
  if (noise < best_noise_ * (1 - kMinImprovement)) {
    best_noise_ = noise;
    stalled_ = 0;
  } else {
    ++stalled_;
  }
  if (rounds < options_.min_samples || elapsed_s < options_.min_time_s) return {};
  if (noise < options_.max_noise) return "noise";
  if (stalled_ >= kStallCheckpoints) return "stalled";
  return {};
}

proto::CaseTiming summarize_case(const task::Dims& dims, const std::vector<double>& candidate_us,
                                 const std::vector<double>& reference_us, const std::vector<NamedSamples>& baselines,
                                 uint64_t bootstrap_seed, int64_t warmup_iters, const std::string& stop_reason,
                                 const std::vector<size_t>& block_starts) {
  proto::CaseTiming t;
  t.dims = std::map<std::string, int64_t>(dims.begin(), dims.end());
  t.candidate = compute_stats(candidate_us);
  t.reference = compute_stats(reference_us);
  t.speedup = t.candidate.median_us > 0 ? t.reference.median_us / t.candidate.median_us : 0;
  SpeedupInterval interval = bootstrap_speedup(reference_us, candidate_us, bootstrap_seed, 2000, block_starts);
  t.speedup_lo = interval.lo;
  t.speedup_hi = interval.hi;
  for (const auto& b : baselines) {
    proto::BaselineTiming bt;
    bt.name = b.name;
    bt.stats = compute_stats(b.samples_us);
    bt.speedup = t.candidate.median_us > 0 ? bt.stats.median_us / t.candidate.median_us : 0;
    if (b.samples_us.size() == candidate_us.size()) {
      const SpeedupInterval iv = bootstrap_speedup(b.samples_us, candidate_us, bootstrap_seed, 2000, block_starts);
      bt.speedup_lo = iv.lo;
      bt.speedup_hi = iv.hi;
    }
    t.baselines.push_back(std::move(bt));
  }
  t.warmup_iters = warmup_iters;
  t.stop_reason = stop_reason;
  return t;
}

OrderMedians candidate_medians_by_order(const std::vector<double>& candidate_us) {
  std::vector<double> side[2];
  for (size_t i = 0; i < candidate_us.size(); ++i) side[i % 2].push_back(candidate_us[i]);
  return {side[0].empty() ? 0 : compute_stats(side[0]).median_us,
          side[1].empty() ? 0 : compute_stats(side[1]).median_us};
}

std::vector<double> block_medians(const std::vector<double>& samples_us, const std::vector<size_t>& block_starts) {
  std::vector<double> medians;
  for (size_t b = 0; b < std::max<size_t>(block_starts.size(), 1); ++b) {
    const std::vector<double> block = block_samples(samples_us, block_starts, b);
    if (!block.empty()) medians.push_back(compute_stats(block).median_us);
  }
  return medians;
}

BlockRange block_median_range(const std::vector<double>& samples_us, const std::vector<size_t>& block_starts) {
  const std::vector<double> medians = block_medians(samples_us, block_starts);
  if (medians.empty()) return {};
  const auto [lo, hi] = std::minmax_element(medians.begin(), medians.end());
  return {*lo, *hi};
}

Allowance group_spread(const std::vector<double>& samples_us, const std::vector<size_t>& block_starts,
                       const std::vector<int>& groups) {
  struct Group {
    std::vector<double> samples;
    size_t blocks = 0;
  };
  std::map<int, Group> by_group;
  for (size_t b = 0; b < block_starts.size() && b < groups.size(); ++b) {
    const std::vector<double> block = block_samples(samples_us, block_starts, b);
    if (block.empty()) continue;
    Group& g = by_group[groups[b]];
    g.samples.insert(g.samples.end(), block.begin(), block.end());
    ++g.blocks;
  }
  std::vector<double> medians;
  for (const auto& [id, g] : by_group) {
    if (g.blocks >= kMinGroupBlocks && g.samples.size() >= kMinGroupSamples)
      medians.push_back(compute_stats(g.samples).median_us);
  }
  if (medians.size() < 2) return {};
  const double all = compute_stats(samples_us).median_us;
  const auto [lo, hi] = std::minmax_element(medians.begin(), medians.end());
  return {std::max(*hi - all, 0.0), std::max(all - *lo, 0.0)};
}

void widen_interval(proto::CaseTiming& t, double candidate_us, double reference_us) {
  const double c = t.candidate.median_us, r = t.reference.median_us;
  if (c <= 0 || r <= 0) return;
  candidate_us = std::max(candidate_us, 0.0);
  reference_us = std::max(reference_us, 0.0);
  t.speedup_lo *= std::max(1 - reference_us / r, 0.0) / (1 + candidate_us / c);
  t.speedup_hi *= (1 + reference_us / r) / std::max(1 - candidate_us / c, 0.5);
}

void cover_interval(proto::CaseTiming& t, const Allowance& candidate, const Allowance& reference) {
  const double c = t.candidate.median_us, r = t.reference.median_us;
  if (c <= 0 || r <= 0) return;
  auto at_least_0 = [](double x) { return std::max(x, 0.0); };
  const double lo = std::max(r - at_least_0(reference.faster_us), 0.0) / (c + at_least_0(candidate.slower_us));
  const double hi = (r + at_least_0(reference.slower_us)) / std::max(c - at_least_0(candidate.faster_us), c / 2);
  t.speedup_lo = std::min(t.speedup_lo, lo);
  t.speedup_hi = std::max(t.speedup_hi, hi);
}

}  // namespace detail
}  // namespace kiln::eval
