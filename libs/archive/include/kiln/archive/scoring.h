// Scoring of one candidate's result (DESIGN §6, after KernelFoundry's EvalResult): the perf_score
// levels, the fitness that ranks programs, and the condensed feedback that proposers read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "kiln/proto/payloads.h"

namespace kiln::archive {

// perf_score levels. Every level outranks the ones below it, so the fitness keeps that order too.
inline constexpr int64_t kScoreNoCode = 0;       // the proposer produced no code
inline constexpr int64_t kScoreBuildFailed = 1;  // the compiler refused it
inline constexpr int64_t kScoreCrashed = 2;      // crashed, timed out, failed to load, no result
inline constexpr int64_t kScoreWrongShape = 3;   // wrong shape or non-finite output
inline constexpr int64_t kScoreWrongValues = 4;  // wrong values or modified inputs
inline constexpr int64_t kScoreCorrect = 5;

// The feedback a proposer gets is bounded: it goes into prompts and into every proposal job.
inline constexpr size_t kMaxEvalLogBytes = 2048;

// The perf_score of a result: the stage it stopped at, then the tester's verdict (TestReport.status).
int64_t perf_score_for(const proto::ScoreResult& result);

// The status word stored with the score: "no_code", "build_failed" or the tester's status
// ("crashed" when the tester gave none).
std::string status_for(const proto::ScoreResult& result);

// Fitness: perf_score + speedup when the speedup was measured, else perf_score + 1/runtime (ms) for a
// correct kernel, else perf_score. A speedup only counts for a correct kernel, so any correct kernel
// outranks any incorrect one whatever the timings say.
double combined_score(const proto::EvalResult& eval);

// Every benchmark case counts. A task lists several benchmark cases because it runs at several shapes,
// so a program is summarized over all of them with the geometric mean, the mean of ratios that treats a
// 2x gain on one case and a 2x loss on another as a wash, whatever the cases' absolute times:
//   runtime_improvement = geomean of the cases' speedups (-1 unless every case was measured), which is
//                         also geomean(reference medians) / geomean(candidate medians);
//   runtime             = geomean of the candidate medians (ms);
//   runtime_stats       = the same summary: *_us keys are geomeans over the cases, "n" the fewest samples
//                         and "cv" the noisiest case; "speedup" the geomean; "speedup_lo" / "speedup_hi" the
//                         geomeans of the cases' bounds (an interval that holds whenever every case's own
//                         does, so it is at least as wide as a proper interval of the geomean);
//                         "min_speedup_lo" the lowest case's lower bound; "cases" the number of cases;
//   improve_over_baseline = geomean over the cases of first baseline median / candidate median;
//   cases               = every case's numbers.
// With one case each of these is that case's number. So the fitness (combined_score) is perf_score plus
// the geomean speedup: a kernel 4x faster on one case and 2x slower on another scores +1.41, not +4.
//
// The promotion decision is per case (speedup_shortfall): every case's speedup and the lower bound of
// its 95 % interval must reach min_speedup, in the eval and in the confirming measurement. Not the
// geomean of the lower bounds: that would register a kernel as verified faster while it is measurably
// slower at one of the task's own shapes, which is exactly what a registry entry must rule out. Asking
// every case to clear the bar is also the sound test of "faster at every shape": as an
// intersection-union test its error rate is at most each case's 5 %, with no correction for the number
// of cases (Berger 1982), whereas a mean of bounds has no stated coverage at all.

// The full EvalResult of one result: perf_score, the timing summary above, profiler_data (build
// resources), metadata (how it was measured), combined_score and the condensed eval_log. Leaves
// template_results to the campaign (it depends on the other programs).
proto::EvalResult evaluate(const proto::ScoreResult& result);

// Condensed feedback, at most kMaxEvalLogBytes: the compiler's error lines, or the test status with the
// first mismatches, or a timing summary (median, speedup [lo, hi] per case, the geomean, params).
std::string condensed_eval_log(const proto::ScoreResult& result, int64_t perf_score);

// Why a measurement does not clear the promotion bar (correct, timed, and for every benchmark case the
// speedup and the lower bound of its interval both >= min_speedup); empty when it does. With several
// cases each one that falls short is named by its dims.
std::string speedup_shortfall(const proto::ScoreResult& result, double min_speedup);

// Cuts `text` to at most `max_bytes` without splitting a UTF-8 sequence, marking the cut.
std::string truncate_utf8(std::string_view text, size_t max_bytes);

// "BLOCK=256 VEC=4" (map order); "" without params.
std::string params_string(const std::map<std::string, std::string>& params);

}  // namespace kiln::archive
