#include "kiln/archive/scoring.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <vector>

#include "kiln/core/strings.h"
#include "kiln/proto/ids.h"

namespace kiln::archive {

namespace {

constexpr size_t kMaxMismatchLines = 5;
constexpr std::string_view kCutMark = "\n[...]";

std::string dims_text(const std::map<std::string, int64_t>& dims) {
  std::string out;
  for (const auto& [k, v] : dims) {
    if (!out.empty()) out.push_back(',');
    out += k + "=" + std::to_string(v);
  }
  return out.empty() ? "default" : out;
}

bool contains_ci(std::string_view haystack, std::string_view needle) {
  auto it = std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(),
                        [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; });
  return it != haystack.end();
}

// Compiler output is long and mostly notes; the error lines are what a proposer needs. Falls back to
// the head of the log when no line says "error".
std::string compile_errors(std::string_view log, size_t budget) {
  std::string errors;
  size_t pos = 0;
  while (pos < log.size() && errors.size() < budget) {
    size_t eol = log.find('\n', pos);
    if (eol == std::string_view::npos) eol = log.size();
    std::string_view line = log.substr(pos, eol - pos);
    if (contains_ci(line, "error")) {
      errors.append(line);
      errors.push_back('\n');
    }
    pos = eol + 1;
  }
  return errors.empty() ? std::string(log) : errors;
}

// The benchmark cases of a measurement; none unless the tester says it measured them all.
const std::vector<proto::CaseTiming>& measured_cases(const proto::ScoreResult& r) {
  static const std::vector<proto::CaseTiming> kNone;
  const auto& perf = r.test.performance;
  return perf.measured ? perf.cases : kNone;
}

// The geometric mean of `value(case)` over the cases; -1 unless every value is positive (a case that was
// not measured leaves no mean).
template <class F>
double geomean(const std::vector<proto::CaseTiming>& cases, F value) {
  if (cases.empty()) return -1;
  double log_sum = 0;
  for (const auto& c : cases) {
    const double v = value(c);
    if (!(v > 0) || !std::isfinite(v)) return -1;
    log_sum += std::log(v);
  }
  return std::exp(log_sum / static_cast<double>(cases.size()));
}

// The same for a statistic of the runtime_stats summary: 0 when a case has none (nothing to average), so
// a single case reads as its own value.
template <class F>
double stat_geomean(const std::vector<proto::CaseTiming>& cases, F value) {
  return std::max(geomean(cases, value), 0.0);
}

// Why one case misses the bar; empty when it clears it.
std::string case_shortfall(const proto::CaseTiming& c, double min_speedup) {
  if (c.speedup >= min_speedup && c.speedup_lo >= min_speedup) return {};
  return "speedup " + format_value("%.3f", c.speedup) + " [" + format_value("%.3f", c.speedup_lo) + ", " +
         format_value("%.3f", c.speedup_hi) + "] below " + format_value("%.2f", min_speedup);
}

std::string timing_line(const proto::CaseTiming& c) {
  std::string line = dims_text(c.dims) + ": median " + format_value("%.4g", c.candidate.median_us) + " us (reference " +
                     format_value("%.4g", c.reference.median_us) + " us), speedup " + format_value("%.3f", c.speedup) +
                     " [" + format_value("%.3f", c.speedup_lo) + ", " + format_value("%.3f", c.speedup_hi) +
                     "], n=" + std::to_string(c.candidate.n) + ", cv " + format_value("%.3g", c.candidate.cv);
  for (const auto& b : c.baselines)
    line += "; " + b.name + " " + format_value("%.4g", b.stats.median_us) + " us (x" + format_value("%.3f", b.speedup) +
            ")";
  return line;
}

// "crashed: SIGSEGV": the status word, then the tester's message unless it already starts with it.
std::string status_line(const proto::ScoreResult& r, const std::string& status) {
  const std::string& message = r.test.message;
  if (message.empty()) return status;
  if (message.rfind(status, 0) == 0) return message;
  return status + ": " + message;
}

}  // namespace

std::string truncate_utf8(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t keep = max_bytes > kCutMark.size() ? max_bytes - kCutMark.size() : 0;
  // Never end inside a multi-byte sequence: back off over continuation bytes (10xxxxxx).
  while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) --keep;
  std::string out(text.substr(0, keep));
  if (max_bytes >= kCutMark.size()) out += kCutMark;
  return out;
}

std::string params_string(const std::map<std::string, std::string>& params) {
  std::string out;
  for (const auto& [k, v] : params) {
    if (!out.empty()) out.push_back(' ');
    out += k + "=" + v;
  }
  return out;
}

int64_t perf_score_for(const proto::ScoreResult& r) {
  if (r.stage == proto::Stage::kPropose) return kScoreNoCode;
  if (r.stage == proto::Stage::kCompile) return kScoreBuildFailed;
  // No verdict at all: no usable result.
  if (!r.test.status) return kScoreCrashed;
  switch (*r.test.status) {
    case proto::TestStatus::kOk: return kScoreCorrect;
    case proto::TestStatus::kMismatch:
    case proto::TestStatus::kInputModified: return kScoreWrongValues;
    case proto::TestStatus::kWrongShape:
    case proto::TestStatus::kNonFinite: return kScoreWrongShape;
    // A tester gives an evaluator_error back rather than scoring it; one that came anyway has no result.
    case proto::TestStatus::kCrashed:
    case proto::TestStatus::kTimedOut:
    case proto::TestStatus::kLoadFailed:
    case proto::TestStatus::kEvaluatorError: return kScoreCrashed;
  }
  return kScoreCrashed;  // no TestStatus: decode() never makes one
}

std::string status_for(const proto::ScoreResult& r) {
  if (r.stage == proto::Stage::kPropose) return "no_code";
  if (r.stage == proto::Stage::kCompile) return "build_failed";
  return std::string(proto::name(r.test.status.value_or(proto::TestStatus::kCrashed)));
}

double combined_score(const proto::EvalResult& e) {
  double score = static_cast<double>(e.perf_score);
  if (!e.correctness) return score;
  if (e.runtime_improvement > 0) return score + e.runtime_improvement;
  if (e.runtime > 0) return score + 1.0 / e.runtime;
  return score;
}

std::string condensed_eval_log(const proto::ScoreResult& r, int64_t perf_score) {
  std::string log;
  if (perf_score == kScoreNoCode) {
    log = "no code extracted: " + (r.error.empty() ? std::string("the proposer returned nothing") : r.error);
  } else if (perf_score == kScoreBuildFailed) {
    log = "build failed";
    if (!r.error.empty()) log += ": " + r.error;
    log += "\n";
    log += compile_errors(r.build.log, kMaxEvalLogBytes);
  } else {
    const auto& t = r.test;
    const auto& c = t.correctness;
    log = status_line(r, status_for(r)) + "\n";
    if (perf_score == kScoreCorrect) {
      log += "correct on " + std::to_string(c.tested_shapes.size()) + " shapes (max abs error " +
             format_value("%.3g", c.max_abs_error) + ", max rel error " + format_value("%.3g", c.max_rel_error) + ")\n";
      if (t.performance.measured) {
        for (const auto& tc : t.performance.cases) log += timing_line(tc) + "\n";
        const auto& cases = t.performance.cases;
        if (cases.size() > 1) {
          const auto speedup = [](const proto::CaseTiming& k) { return k.speedup; };
          log += "geomean speedup over " + std::to_string(cases.size()) + " cases " +
                 format_value("%.3f", geomean(cases, speedup)) + "\n";
        }
      } else {
        log += "not timed\n";
      }
      // Nsight Compute's view, when the tester took one: what the proposer can act on next.
      if (!t.profile_summary.empty()) log += t.profile_summary + "\n";
    } else if (perf_score >= kScoreWrongShape) {
      log += std::to_string(c.mismatches) + " mismatches, max abs error " + format_value("%.3g", c.max_abs_error) +
             ", max rel error " + format_value("%.3g", c.max_rel_error) + " (rtol " + format_value("%.3g", c.rtol) +
             ", atol " + format_value("%.3g", c.atol) + ")\n";
      size_t n = std::min(c.first_mismatches.size(), kMaxMismatchLines);
      for (size_t i = 0; i < n; ++i) log += "  " + c.first_mismatches[i] + "\n";
    } else if (!t.log.empty()) {
      log += t.log.substr(0, kMaxEvalLogBytes / 2);
      log += "\n";
    }
  }
  if (!r.cand.params.empty()) log += "params: " + params_string(r.cand.params) + "\n";
  return truncate_utf8(log, kMaxEvalLogBytes);
}

proto::EvalResult evaluate(const proto::ScoreResult& r) {
  proto::EvalResult e;
  e.perf_score = perf_score_for(r);
  e.status = status_for(r);
  e.compiled = e.perf_score >= kScoreCrashed;
  e.correctness = e.perf_score == kScoreCorrect;

  const std::vector<proto::CaseTiming>& cases = measured_cases(r);
  if (!cases.empty()) {
    auto mean = [&](auto value) { return geomean(cases, value); };
    const double median_us = mean([](const proto::CaseTiming& c) { return c.candidate.median_us; });
    if (median_us > 0) e.runtime = median_us / 1000.0;
    if (double s = mean([](const proto::CaseTiming& c) { return c.speedup; }); s > 0) e.runtime_improvement = s;
    // The first baseline of each case, against the candidate; its own speedup when the medians are missing.
    e.improve_over_baseline = mean([](const proto::CaseTiming& c) -> double {
      if (c.baselines.empty()) return -1;
      const auto& b = c.baselines.front();
      if (b.stats.median_us > 0 && c.candidate.median_us > 0) return b.stats.median_us / c.candidate.median_us;
      return b.speedup;
    });
    int64_t fewest = cases.front().candidate.n;
    double noisiest = 0, min_lo = cases.front().speedup_lo;
    for (const auto& c : cases) {
      fewest = std::min(fewest, c.candidate.n);
      noisiest = std::max(noisiest, c.candidate.cv);
      min_lo = std::min(min_lo, c.speedup_lo);
      proto::CaseSpeedup cs;
      cs.dims = c.dims;
      cs.speedup = c.speedup;
      cs.speedup_lo = c.speedup_lo;
      cs.speedup_hi = c.speedup_hi;
      cs.median_us = c.candidate.median_us;
      cs.reference_median_us = c.reference.median_us;
      cs.n = c.candidate.n;
      cs.baselines = c.baselines;
      e.cases.push_back(std::move(cs));
    }
    auto stat = [&](auto value) { return stat_geomean(cases, value); };
    e.runtime_stats = {
        {"n", static_cast<double>(fewest)},
        {"median_us", stat([](const proto::CaseTiming& c) { return c.candidate.median_us; })},
        {"mean_us", stat([](const proto::CaseTiming& c) { return c.candidate.mean_us; })},
        {"stdev_us", stat([](const proto::CaseTiming& c) { return c.candidate.stdev_us; })},
        {"cv", noisiest},
        {"p10_us", stat([](const proto::CaseTiming& c) { return c.candidate.p10_us; })},
        {"p90_us", stat([](const proto::CaseTiming& c) { return c.candidate.p90_us; })},
        {"reference_median_us", stat([](const proto::CaseTiming& c) { return c.reference.median_us; })},
        {"speedup", stat([](const proto::CaseTiming& c) { return c.speedup; })},
        {"speedup_lo", stat([](const proto::CaseTiming& c) { return c.speedup_lo; })},
        {"speedup_hi", stat([](const proto::CaseTiming& c) { return c.speedup_hi; })},
        {"min_speedup_lo", min_lo},
        {"cases", static_cast<double>(cases.size())},
    };
  }
  // Build resources feed the hardware dimensions of the MAP-Elites grid later; -1 means unknown.
  const auto& b = r.build;
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"registers", b.registers},
                                    {"shared_bytes", b.shared_bytes},
                                    {"spill_bytes", b.spill_bytes},
                                    {"stack_bytes", b.stack_bytes}}) {
    if (value >= 0) e.profiler_data[name] = static_cast<double>(value);
  }
  // The tester's Nsight Compute profile (kiln/cuda/profile.h keys), beside ptxas's numbers.
  for (const auto& [name, value] : r.test.profile) e.profiler_data["ncu_" + name] = value;
  // How it was measured and built, so the numbers can be read later without the tester's logs.
  if (r.stage == proto::Stage::kTest) {
    e.metadata = r.test.metadata;
    auto put = [&](const char* key, const std::string& value) {
      if (!value.empty()) e.metadata[key] = value;
    };
    const proto::WorkerInfo& w = r.test.worker;
    put("device", w.device_name);
    put("host", w.host);
    put("worker_id", w.worker_id);
    put("driver_version", w.driver_version);
    put("runtime_version", w.runtime_version);
    put("toolchain", w.toolchain);
    put("timing_method", r.test.performance.method);
    put("timing_mode", r.test.performance.mode);
    put("build_toolchain", b.toolchain);
    put("build_flags", b.flags);
  }
  e.eval_log = condensed_eval_log(r, e.perf_score);
  e.combined_score = combined_score(e);
  return e;
}

std::string speedup_shortfall(const proto::ScoreResult& r, double min_speedup) {
  if (perf_score_for(r) != kScoreCorrect) {
    if (!r.error.empty()) return status_for(r) + ": " + r.error;
    return status_line(r, status_for(r));
  }
  const std::vector<proto::CaseTiming>& cases = measured_cases(r);
  if (cases.empty()) return "not timed";
  std::string out;
  for (const auto& c : cases) {
    std::string why = case_shortfall(c, min_speedup);
    if (why.empty()) continue;
    if (!out.empty()) out += "; ";
    out += cases.size() > 1 ? dims_text(c.dims) + ": " + why : why;
  }
  return out;
}

}  // namespace kiln::archive
