// run_protocol(): DESIGN §5 once, for every device (kiln/eval/device.h).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "case_log.h"
#include "kiln/eval/detail/protocol.h"
#include "kiln/eval/device.h"
#include "kiln/eval/device_lock.h"
#include "kiln/eval/stats.h"

namespace kiln::eval {

std::string Device::Call::what() const {
  if (!death.empty()) return death;
  if (!device_error.empty()) return device_error;
  return "kiln_entry returned " + std::to_string(rc);
}

namespace {

using Clock = std::chrono::steady_clock;
using Kind = Device::CallKind;

constexpr size_t kCandidate = 0;
constexpr size_t kReference = 1;

// Timing runs in blocks of rounds: between blocks the device moves every contestant's tensors (other
// pages, cache sets, memory channels) and may give it fresh processes, so an offset fixed for one
// placement or one process shows in the interval as spread, which the bootstrap resamples whole blocks
// of, instead of as a confident bias. A block lasts at least kMinBlockRounds rounds and min_time_s /
// kBlocks seconds.
constexpr int64_t kMinBlockRounds = 2;
constexpr double kBlocks = 10;
// Screening looks at the interval from the fourth block on (the block bootstrap needs four), at 99.5 %:
// with up to seven looks per case, a candidate that could reach the bar is screened out by chance in well
// under 5 % of cases.
constexpr size_t kScreenBlocks = 4;
constexpr double kScreenConfidence = 0.995;
constexpr int kScreenResamples = 1000;
// The precision stop looks from the sixth block on (fewer say little about the spread between blocks), at
// the reported 95 %, and no sooner than kPreciseSpacing of the time measured since its last look, so its
// bootstraps cost a bounded share of the timing however short the blocks are.
constexpr size_t kPreciseBlocks = 6;
constexpr double kPreciseConfidence = 0.95;
constexpr int kPreciseResamples = 400;
constexpr double kPreciseSpacing = 1.0 / 6;
// Timed outputs are compared with the reference's after every one of a case's first rounds (a run cut
// short by a loaded machine or by screening has few rounds, and a cheat must not get through them on the
// luck of the draw), after the first round of every block on fresh processes (a cache the candidate filled
// while warming up a fresh process serves a stale answer there), after about one round in four,
// unpredictably, and after the last. The first rounds' comparisons are paid for out of a budget: free up
// to kFreeCompare_s in all, then while comparing has taken at most kCompareShare of the timing's wall time;
// the one-in-four comparisons stop while comparing is over that share. A case whose outputs take long to
// read back and compare (hundreds of MiB on a GPU) would otherwise spend its time limit comparing and be
// measured in a handful of rounds; small cases, and slow rounds on a loaded machine, compare every one.
constexpr int64_t kCompareFirstRounds = 16;
constexpr double kFreeCompare_s = 0.05;
constexpr double kCompareShare = 0.25;

double seconds_since(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

class Protocol {
 public:
  Protocol(const task::TaskSpec& spec, Device& device, const EvalOptions& options)
      : spec_(spec), device_(device), options_(options) {}

  Result<proto::TestReport> run() {
    Result<proto::TestReport> report = run_unaccounted();
    if (report.is_ok() && lock_.active()) {
      // How long this evaluation waited for the device and held it (the time other slots waited on it).
      using Mode = DeviceLock::Mode;
      auto& m = report->metadata;
      m["eval_exclusive_s"] = metadata_seconds(lock_.held_s(Mode::kExclusive));
      m["eval_exclusive_wait_s"] = metadata_seconds(lock_.waited_s(Mode::kExclusive));
      m["eval_shared_s"] = metadata_seconds(lock_.held_s(Mode::kShared));
      m["eval_shared_wait_s"] = metadata_seconds(lock_.waited_s(Mode::kShared));
      m["eval_fill_s"] = metadata_seconds(fill_s_);
      m["eval_recheck_s"] = metadata_seconds(recheck_s_);
    }
    return report;
  }

 private:
  Result<proto::TestReport> run_unaccounted() {
    proto::TestReport report;
    report.correctness.rtol = spec_.rtol;
    report.correctness.atol = spec_.atol;
    report.performance.mode = options_.timing.mode;
    if (const std::string why = device_.candidate_load_failure(); !why.empty()) {
      report.status = proto::TestStatus::kLoadFailed;
      report.message = "cannot load the kernel: " + why;
      return report;
    }
    KILN_RETURN_IF_ERROR(device_.check_started());
    KILN_ASSIGN_OR_RETURN(lock_, DeviceLock::open(options_.device_lock));
    if (options_.profile_run) return profile_call(std::move(report));
    const auto began = Clock::now();
    KILN_RETURN_IF_ERROR(correctness());
    // Where an evaluation's time goes (the tester keeps these keys of the report's metadata).
    report.metadata["eval_correctness_s"] = metadata_seconds(seconds_since(began));
    detail::conclude(f_, report);
    report.performance.method = device_.timing_method();
    if (!report.correctness.passed || !options_.measure) return report;
    const double correctness_s = seconds_since(began);

    std::string speedups;
    for (const auto& dims : spec_.benchmark_cases) {
      const std::string shape = task::dims_string(dims);
      // The case's tensors, their values unset: the device draws the timing's inputs where it keeps them.
      KILN_ASSIGN_OR_RETURN(TensorSet shapes, allocate(spec_, dims));
      proto::CaseTiming timing;
      KILN_ASSIGN_OR_RETURN(bool timed, time_case(dims, shapes, timing));
      if (!timed) break;
      const auto recheck_began = Clock::now();
      KILN_RETURN_IF_ERROR(recheck_after_timing(dims, shapes));
      recheck_s_ += seconds_since(recheck_began);
      if (candidate_failed()) break;
      f_.tested(shape);
      const std::string interval = detail::format_ratio(timing.speedup) + " [" +
                                   detail::format_ratio(timing.speedup_lo) + ", " +
                                   detail::format_ratio(timing.speedup_hi) + "]";
      if (timing.stop_reason == proto::stop_reason::kScreened) {
        speedups += "; screened out on " + shape + ": speedup " + interval + " cannot reach " +
                    detail::format_ratio(options_.timing.screen_below);
      } else {
        speedups += "; speedup " + interval + " on " + shape;
      }
      report.performance.cases.push_back(std::move(timing));
    }
    report.metadata["eval_measure_s"] = metadata_seconds(seconds_since(began) - correctness_s);
    report.metadata["eval_draw_s"] = metadata_seconds(draw_s_);
    report.performance.measured = report.performance.cases.size() == spec_.benchmark_cases.size();
    report.performance.method = device_.timing_method();
    detail::conclude(f_, report);
    if (report.correctness.passed) report.message += speedups;
    return report;
  }

  // Inputs from `seed` (timed: drawing hundreds of MiB is a share of an evaluation worth knowing).
  void fill(TensorSet& set, uint64_t seed) {
    const auto began = Clock::now();
    fill_inputs(spec_, set, seed);
    fill_s_ += seconds_since(began);
  }

  bool candidate_failed() const { return !f_.failed_call.empty() || !f_.crashed.empty(); }

  // A call of the candidate that failed is recorded (true: stop evaluating it); one of a trusted contestant
  // is an error.
  Result<bool> failed(size_t who, const Device::Call& c, const std::string& context) {
    if (c.ok()) return false;
    if (who != kCandidate)
      return internal_error("the " + device_.name(who) + " failed: " + c.what() + " (" + context + ")");
    if (!c.death.empty()) {
      f_.crashed = c.death + " (" + context + ")";
    } else if (!c.device_error.empty()) {
      f_.failed_call = c.device_error + " after the candidate's kiln_entry (" + context + ")";
    } else {
      f_.failed_call = detail::call_failure(c.rc, context);
    }
    return true;
  }

  // Loads `values`' inputs (lent, not copied: they are hundreds of MiB for a large case) and outputs
  // poisoned the `variant` way for contestant `who`.
  Status load_poisoned(size_t who, TensorSet& values, int variant) {
    TensorSet set;
    set.outputs = unfilled_like(values.outputs);
    poison_outputs(set, variant);
    set.inputs.swap(values.inputs);
    Status loaded = device_.load(who, set);
    set.inputs.swap(values.inputs);
    return loaded;
  }

  // Calls the candidate on `values` (outputs poisoned the `variant` way) and reads back inputs and outputs
  // into `got` (for check_inputs(), once the device is let go). False when the call failed (recorded).
  Result<bool> candidate_call(TensorSet& values, int variant, TensorSet& got, const std::string& context) {
    KILN_RETURN_IF_ERROR(load_poisoned(kCandidate, values, variant));
    KILN_ASSIGN_OR_RETURN(Device::Call c, device_.call(kCandidate, Kind::kCheck));
    KILN_ASSIGN_OR_RETURN(bool stop, failed(kCandidate, c, context));
    if (stop) return false;
    if (c.descriptors_changed && f_.changed_descriptor.empty()) {
      f_.changed_descriptor = "the kernel changed a tensor descriptor (" + context + ")";
    }
    got = unfilled_like(values);
    KILN_RETURN_IF_ERROR(device_.read(kCandidate, got, true));
    return true;
  }

  // The reference's outputs on `values` (its outputs poisoned first).
  Result<TensorSet> reference_call(TensorSet& values, const std::string& context) {
    KILN_RETURN_IF_ERROR(load_poisoned(kReference, values, 0));
    KILN_ASSIGN_OR_RETURN(Device::Call c, device_.call(kReference, Kind::kCheck));
    KILN_RETURN_IF_ERROR(failed(kReference, c, context).status());
    TensorSet expected;
    expected.outputs = unfilled_like(values.outputs);
    KILN_RETURN_IF_ERROR(device_.read(kReference, expected, false));
    return expected;
  }

  // The device is held (shared) for the calls and reads alone: the comparisons on the host that follow
  // keep no other slot from timing.
  Status check_case(TensorSet& pristine, const std::string& context) {
    TensorSet first, second, expected;
    const std::string again = context + ", second call";
    bool first_ok = false, second_ok = false;
    {
      KILN_ASSIGN_OR_RETURN(DeviceLock::Hold held, lock_.hold(DeviceLock::Mode::kShared));
      KILN_ASSIGN_OR_RETURN(first_ok, candidate_call(pristine, 0, first, context));
      if (first_ok) {
        KILN_ASSIGN_OR_RETURN(expected, reference_call(pristine, context));
        KILN_ASSIGN_OR_RETURN(second_ok, candidate_call(pristine, 1, second, again));
      }
    }
    if (first_ok) detail::check_inputs(spec_, first, pristine, context, f_);
    if (second_ok) detail::check_inputs(spec_, second, pristine, again, f_);
    if (!first_ok || !second_ok) return Status::ok();
    detail::compare_outputs(spec_, first, expected, context, f_);
    detail::compare_outputs(spec_, second, expected, again, f_);
    return Status::ok();
  }

  Status correctness() {
    for (const auto& dims : spec_.correctness_cases) {
      const std::string shape = task::dims_string(dims);
      KILN_ASSIGN_OR_RETURN(TensorSet pristine, allocate(spec_, dims));
      f_.tested(shape);
      for (int64_t seed = 0; seed < spec_.seeds && !candidate_failed(); ++seed) {
        fill(pristine, static_cast<uint64_t>(seed));
        KILN_RETURN_IF_ERROR(check_case(pristine, shape + " seed " + std::to_string(seed)));
      }
      if (candidate_failed()) break;
    }
    return Status::ok();
  }

  // The speedup interval of `samples` so far, widened for reproducibility like the final one (`widen`), or
  // as the samples alone give it.
  proto::CaseTiming interval_now(const std::vector<std::vector<double>>& samples,
                                 const std::vector<size_t>& block_starts, double confidence, int resamples,
                                 bool widen) const {
    proto::CaseTiming t;
    t.candidate.median_us = compute_stats(samples[kCandidate]).median_us;
    t.reference.median_us = compute_stats(samples[kReference]).median_us;
    const SpeedupInterval iv = bootstrap_speedup(samples[kReference], samples[kCandidate], options_.bootstrap_seed,
                                                 resamples, block_starts, confidence);
    t.speedup_lo = iv.lo;
    t.speedup_hi = iv.hi;
    if (widen) own_up(t, samples, block_starts);
    return t;
  }

  // Widens `t` for what another evaluation could measure: each median off by the device's reproducibility
  // (widen_interval), and moved to its slowest or fastest placement group's, on top of that (cover_interval).
  // Returns the candidate's and the reference's allowances.
  std::pair<detail::Allowance, detail::Allowance> own_up(proto::CaseTiming& t,
                                                         const std::vector<std::vector<double>>& samples,
                                                         const std::vector<size_t>& block_starts) const {
    const double cand_us = device_.reproducibility_us(t.candidate.median_us);
    const double ref_us = device_.reproducibility_us(t.reference.median_us);
    detail::widen_interval(t, cand_us, ref_us);
    const detail::Allowance c = detail::group_spread(samples[kCandidate], block_starts, block_groups_[kCandidate]);
    const detail::Allowance r = detail::group_spread(samples[kReference], block_starts, block_groups_[kReference]);
    const detail::Allowance cand{cand_us + c.slower_us, cand_us + c.faster_us};
    const detail::Allowance ref{ref_us + r.slower_us, ref_us + r.faster_us};
    detail::cover_interval(t, cand, ref);
    return {cand, ref};
  }

  // Screening: whether the candidate's interval so far lies wholly below the bar it would have to reach.
  bool screened_out(const std::vector<std::vector<double>>& samples, const std::vector<size_t>& block_starts) const {
    const double bar = options_.timing.screen_below;
    if (bar <= 0 || block_starts.size() < kScreenBlocks) return false;
    return interval_now(samples, block_starts, kScreenConfidence, kScreenResamples, true).speedup_hi < bar;
  }

  // The precision stop: whether the speedup's interval so far is at most 2 * precision * speedup wide, as
  // the samples give it: the widening for reproducibility is the same however many samples there are, so
  // waiting for it to narrow would only run every case to max_time_s.
  bool precise(const std::vector<std::vector<double>>& samples, const std::vector<size_t>& block_starts) const {
    const proto::CaseTiming t = interval_now(samples, block_starts, kPreciseConfidence, kPreciseResamples, false);
    if (t.candidate.median_us <= 0 || !std::isfinite(t.speedup_lo) || !std::isfinite(t.speedup_hi)) return false;
    const double speedup = t.reference.median_us / t.candidate.median_us;
    return t.speedup_hi - t.speedup_lo <= 2 * options_.timing.precision * speedup;
  }

  // Timing of one benchmark case; false when the candidate failed (recorded). Outputs that differ from the
  // reference's in a timed round are recorded and timing goes on: the check after timing may still find
  // worse (inputs written), which the verdict names first. `shapes` are the case's tensors, their values
  // unset: the device draws the inputs.
  Result<bool> time_case(const task::Dims& dims, const TensorSet& shapes, proto::CaseTiming& timing) {
    const TimingOptions& opt = options_.timing;
    const std::string shape = task::dims_string(dims);
    const size_t n = device_.contestants();
    // The inputs change a little before every round (a block copied in from a second input set), the same
    // for every contestant, and the timed outputs of the candidate are compared with the reference's of
    // the same round at rounds it cannot predict and after the last one. A kernel that serves results
    // from a cache keyed on the input address and a few sampled values can then not be both fast and right.
    // The second set is the check after timing's inputs (kRecheckSeed), drawn once for both: the blocks
    // land at places other than where they come from, so no timed round's inputs are those of the check.
    {
      // The device draws both sets (shared: other slots' correctness may run alongside, no slot's timing).
      KILN_ASSIGN_OR_RETURN(DeviceLock::Hold shared, lock_.hold(DeviceLock::Mode::kShared));
      KILN_RETURN_IF_ERROR(device_.check_case(shapes).with_context("case " + shape));
      const auto drawing = Clock::now();
      KILN_RETURN_IF_ERROR(device_.begin_timing(spec_, shapes, kTimingSeed, kRecheckSeed));
      draw_s_ += seconds_since(drawing);
    }
    // Nothing else uses the device while this case is timed (other evaluation slots wait); the host work
    // above was done before taking it.
    KILN_ASSIGN_OR_RETURN(DeviceLock::Hold held, lock_.hold(DeviceLock::Mode::kExclusive));

    size_t previous = n;  // whose call ran last on the device (n: nobody's yet)
    auto warm_up = [&]() -> Result<bool> {
      for (int64_t w = 0; w < opt.warmup_iters; ++w) {
        for (size_t who = 0; who < n; ++who) {
          KILN_ASSIGN_OR_RETURN(Device::Call c, device_.call(who, Kind::kWarmUp));
          KILN_ASSIGN_OR_RETURN(bool stop, failed(who, c, shape + ", warm-up"));
          if (stop) return false;
          previous = who;
        }
      }
      return true;
    };
    // The timed outputs as read back (a comparison reads outputs only).
    TensorSet got, expected;
    got.outputs = unfilled_like(shapes.outputs);
    expected.outputs = unfilled_like(shapes.outputs);
    std::vector<size_t> block_starts;
    detail::Placements placements;  // the candidate's and the reference's, per block (Device::placement)
    for (auto& g : block_groups_) g.clear();
    bool fresh_block = false;  // the current block runs on processes that have not been timed before
    auto start_block = [&](int64_t round) -> Result<bool> {
      const uint64_t block = block_starts.size();
      KILN_ASSIGN_OR_RETURN(Device::Block b, device_.begin_block(block));
      fresh_block = block == 0 || b.fresh;
      if (b.fresh) {
        // Fresh processes were forked from this one: memory written before then is shared copy-on-write
        // with them, and reading outputs back into it would copy every page first. New buffers cost less.
        got.outputs = unfilled_like(shapes.outputs);
        expected.outputs = unfilled_like(shapes.outputs);
      }
      if (!b.candidate_death.empty()) {
        f_.crashed = b.candidate_death + " (" + shape + ", timing block " + std::to_string(block) + ")";
        return false;
      }
      block_starts.push_back(static_cast<size_t>(round));
      for (size_t who : {kCandidate, kReference}) {
        placements[who].push_back(device_.placement(who));
        block_groups_[who].push_back(device_.placement_group(who));
      }
      // The inputs as they stand and poisoned outputs, from the device's own copy.
      for (size_t who = 0; who < n; ++who) KILN_RETURN_IF_ERROR(device_.load_block(who, shapes));
      if (block == 0 || b.fresh) return warm_up();
      return true;
    };
    std::vector<PerturbBlock> blocks(shapes.inputs.size());
    auto perturb = [&](uint64_t round) -> Status {
      for (size_t i = 0; i < shapes.inputs.size(); ++i)
        blocks[i] = perturb_block(shapes.inputs[i].elements(), round, i);
      return device_.perturb(Device::kOwnCopy, blocks);
    };
    int64_t compared = -1;  // the last round whose outputs were compared
    double compare_s = 0;   // wall time spent comparing timed outputs
    int64_t compares = 0;
    std::vector<Comparison> on_device;
    auto compare_round = [&](int64_t round) -> Status {
      compared = round;
      const auto began = Clock::now();
      ++compares;
      // On the device where it can (nothing crosses the bus); read back and compared on the host where it
      // cannot, and where the outputs differ (the host lists the first mismatches).
      KILN_ASSIGN_OR_RETURN(bool there,
                            device_.compare_outputs(kCandidate, kReference, spec_.rtol, spec_.atol, on_device));
      if (there && detail::all_match(on_device)) {
        for (const Comparison& c : on_device) merge(c, f_.cmp, detail::kMaxListedMismatches);
      } else {
        KILN_RETURN_IF_ERROR(device_.read(kCandidate, got, false));
        KILN_RETURN_IF_ERROR(device_.read(kReference, expected, false));
        detail::compare_outputs(spec_, got, expected, shape + ", timed round " + std::to_string(round), f_);
      }
      compare_s += seconds_since(began);
      return Status::ok();
    };

    KILN_ASSIGN_OR_RETURN(bool started, start_block(0));
    if (!started) return false;
    KILN_RETURN_IF_ERROR(device_.begin_rounds());
    std::vector<std::vector<double>> samples(n);
    std::vector<RunningStats> running(n);
    int64_t settled = 0;  // timed calls preceded by settling calls
    detail::StoppingRule rule(opt);
    const auto start = Clock::now();
    std::string stop_reason;
    const double block_s = opt.min_time_s / kBlocks;
    double next_block_s = block_s;
    double next_precise_s = 0;  // the precision stop's next look, at the first block start after this
    int64_t block_rounds = 0;
    for (int64_t round = 0; stop_reason.empty(); ++round, ++block_rounds) {
      if (block_rounds >= kMinBlockRounds && seconds_since(start) >= next_block_s) {
        if (screened_out(samples, block_starts)) {
          stop_reason = proto::stop_reason::kScreened;
        } else if (const double now = seconds_since(start); opt.precision > 0 && now >= next_precise_s &&
                                                            now >= opt.min_time_s && round >= opt.min_samples &&
                                                            block_starts.size() >= kPreciseBlocks) {
          if (precise(samples, block_starts)) stop_reason = proto::stop_reason::kPrecise;
          next_precise_s = now * (1 + kPreciseSpacing);
        }
        if (!stop_reason.empty()) {
          if (compared != round - 1) KILN_RETURN_IF_ERROR(compare_round(round - 1));
          break;
        }
        KILN_ASSIGN_OR_RETURN(bool ok, start_block(round));
        if (!ok) return false;
        next_block_s = seconds_since(start) + block_s;
        block_rounds = 0;
      }
      KILN_RETURN_IF_ERROR(perturb(static_cast<uint64_t>(round)));
      // Alternate the order inside each round so neither side always runs right after the other.
      for (size_t k = 0; k < n; ++k) {
        const size_t who = round % 2 == 0 ? n - 1 - k : k;
        // Settling: a short contestant right after a much longer one is timed after calls of its own.
        if (opt.settle_calls > 0 && previous < n && previous != who && running[who].n() > 0 &&
            running[previous].n() > 0 && running[who].mean() * kSettleRatio <= running[previous].mean()) {
          for (int64_t s = 0; s < opt.settle_calls; ++s) {
            KILN_ASSIGN_OR_RETURN(Device::Call settle, device_.call(who, Kind::kWarmUp));
            KILN_ASSIGN_OR_RETURN(bool stop, failed(who, settle, shape + ", settling"));
            if (stop) return false;
          }
          ++settled;
        }
        // The round's inputs reach each contestant right before its timed call (after its settling calls).
        KILN_RETURN_IF_ERROR(device_.perturb(who, blocks));
        KILN_ASSIGN_OR_RETURN(Device::Call c, device_.call(who, Kind::kTimed));
        KILN_ASSIGN_OR_RETURN(bool stop, failed(who, c, shape + ", timing"));
        if (stop) return false;
        samples[who].push_back(c.sample_us);
        running[who].add(c.sample_us);
        previous = who;
      }
      stop_reason = rule.after_round(round + 1, seconds_since(start),
                                     std::max(running[kCandidate].cv(), running[kReference].cv()));
      const bool early = round < kCompareFirstRounds &&
                         (compare_s < kFreeCompare_s || compare_s <= kCompareShare * seconds_since(start));
      const bool sampled = detail::compare_after_round(static_cast<uint64_t>(round)) &&
                           compare_s <= kCompareShare * seconds_since(start);
      if (!stop_reason.empty() || early || (block_rounds == 0 && fresh_block) || sampled) {
        KILN_RETURN_IF_ERROR(compare_round(round));
      }
    }
    const double timing_s = seconds_since(start);
    std::string note;
    KILN_RETURN_IF_ERROR(device_.end_timing(samples, note));
    if (settled > 0) {
      note += (note.empty() ? "" : "; ") + std::to_string(settled) + " timed calls settled by " +
              std::to_string(opt.settle_calls) + " of their own first";
    }
    std::fprintf(
        stderr, "%s: %s: %zu rounds in %zu blocks (%.2f s; outputs compared after %lld, %.2f s), stop: %s%s%s\n",
        device_.log_prefix(), shape.c_str(), samples[kCandidate].size(), block_starts.size(), timing_s,
        static_cast<long long>(compares), compare_s, stop_reason.c_str(), note.empty() ? "" : "; ", note.c_str());
    std::vector<detail::NamedSamples> baselines;
    for (size_t who = 2; who < n; ++who) baselines.push_back({device_.name(who), std::move(samples[who])});
    timing = detail::summarize_case(dims, samples[kCandidate], samples[kReference], baselines, options_.bootstrap_seed,
                                    opt.warmup_iters, stop_reason, block_starts);
    timing.timing_s = timing_s;
    const double samples_lo = timing.speedup_lo, samples_hi = timing.speedup_hi;
    const auto [cand, ref] = own_up(timing, samples, block_starts);
    detail::log_widening(device_, shape, cand, ref, samples_lo, samples_hi);
    detail::log_case_spread(device_, shape, timing, samples, block_starts, placements);
    return true;
  }

  // After timing, the same buffers get new values (the donor's, drawn from kRecheckSeed): a kernel that
  // caches results by where its inputs are fails here. Compared where the device keeps them; read back
  // only to say what differs.
  Status recheck_after_timing(const task::Dims& dims, const TensorSet& shapes) {
    const std::string context = task::dims_string(dims) + ", after timing";
    TensorSet got, expected, donor;
    bool same_inputs = true;
    std::vector<Comparison> on_device;
    {
      KILN_ASSIGN_OR_RETURN(DeviceLock::Hold held, lock_.hold(DeviceLock::Mode::kShared));
      KILN_RETURN_IF_ERROR(device_.load_donor(kReference, shapes, 0));
      KILN_ASSIGN_OR_RETURN(Device::Call ref, device_.call(kReference, Kind::kCheck));
      KILN_RETURN_IF_ERROR(failed(kReference, ref, context).status());
      KILN_RETURN_IF_ERROR(device_.load_donor(kCandidate, shapes, 1));
      KILN_ASSIGN_OR_RETURN(Device::Call c, device_.call(kCandidate, Kind::kCheck));
      KILN_ASSIGN_OR_RETURN(bool stop, failed(kCandidate, c, context));
      if (stop) return Status::ok();
      if (c.descriptors_changed && f_.changed_descriptor.empty()) {
        f_.changed_descriptor = "the kernel changed a tensor descriptor (" + context + ")";
      }
      KILN_ASSIGN_OR_RETURN(same_inputs, device_.inputs_are_donor(kCandidate));
      KILN_ASSIGN_OR_RETURN(bool there,
                            device_.compare_outputs(kCandidate, kReference, spec_.rtol, spec_.atol, on_device));
      if (same_inputs && there && detail::all_match(on_device)) {
        for (const Comparison& cmp : on_device) merge(cmp, f_.cmp, detail::kMaxListedMismatches);
        return Status::ok();
      }
      got = unfilled_like(shapes);
      expected.outputs = unfilled_like(shapes.outputs);
      KILN_RETURN_IF_ERROR(device_.read(kCandidate, got, !same_inputs));
      KILN_RETURN_IF_ERROR(device_.read(kReference, expected, false));
      if (!same_inputs) {
        donor.inputs = unfilled_like(shapes.inputs);
        KILN_RETURN_IF_ERROR(device_.read_donor(donor));
      }
    }
    if (!same_inputs) detail::check_inputs(spec_, got, donor, context, f_);
    detail::compare_outputs(spec_, got, expected, context, f_);
    return Status::ok();
  }

  // One call of the candidate on the first benchmark case, for a profiler watching its process: no other
  // contestant runs a kernel, so every kernel there is the candidate's.
  Result<proto::TestReport> profile_call(proto::TestReport report) {
    if (spec_.benchmark_cases.empty()) return invalid_argument("profile: the task has no benchmark case");
    const task::Dims& dims = spec_.benchmark_cases.front();
    KILN_ASSIGN_OR_RETURN(TensorSet host, allocate(spec_, dims));
    fill_inputs(spec_, host, kTimingSeed);
    KILN_ASSIGN_OR_RETURN(DeviceLock::Hold held, lock_.hold(DeviceLock::Mode::kShared));
    KILN_RETURN_IF_ERROR(load_poisoned(kCandidate, host, 0));
    KILN_ASSIGN_OR_RETURN(Device::Call c, device_.call(kCandidate, Kind::kCheck));
    report.metadata["profile_pid"] = std::to_string(device_.candidate_pid());
    report.metadata["profile_case"] = task::dims_string(dims);
    if (!c.ok()) {
      report.status = proto::TestStatus::kCrashed;
      report.message = "profile run: " + c.what();
      return report;
    }
    report.status = proto::TestStatus::kOk;
    report.message = "profile run on " + task::dims_string(dims);
    return report;
  }

  const task::TaskSpec& spec_;
  Device& device_;
  const EvalOptions& options_;
  // The candidate's and the reference's placement group in each block of the case being timed.
  std::array<std::vector<int>, 2> block_groups_;
  detail::Findings f_;
  DeviceLock lock_;
  double fill_s_ = 0;     // drawing inputs
  double recheck_s_ = 0;  // the checks after timing
  double draw_s_ = 0;     // the device drawing the timing's inputs
};

}  // namespace

Status check_timing_options(const EvalOptions& options) {
  if (options.timing.mode != "cold" && options.timing.mode != "warm") {
    return invalid_argument("timing mode must be cold or warm, got '" + options.timing.mode + "'");
  }
  return Status::ok();
}

Result<proto::TestReport> run_protocol(const task::TaskSpec& spec, Device& device, const EvalOptions& options) {
  if (device.contestants() < 2) return internal_error("run_protocol: a device needs a candidate and a reference");
  return Protocol(spec, device, options).run();
}

}  // namespace kiln::eval
