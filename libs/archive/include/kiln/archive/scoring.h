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
inline constexpr int64_t kScoreNoCode = 0;        // the proposer produced no code
inline constexpr int64_t kScoreBuildFailed = 1;   // the compiler refused it
inline constexpr int64_t kScoreCrashed = 2;       // crashed, timed out, failed to load, no result
inline constexpr int64_t kScoreWrongShape = 3;    // wrong shape or non-finite output
inline constexpr int64_t kScoreWrongValues = 4;   // wrong values or modified inputs
inline constexpr int64_t kScoreCorrect = 5;

// The feedback a proposer gets is bounded: it goes into prompts and into every proposal job.
inline constexpr size_t kMaxEvalLogBytes = 2048;

// The perf_score of a result: the stage it stopped at, then the tester's status word.
int64_t perf_score_for(const proto::ScoreResult& result);

// The status word stored with the score: "no_code", "build_failed" or the tester's status
// ("crashed" when the tester gave none).
std::string status_for(const proto::ScoreResult& result);

// Fitness: perf_score + speedup when the speedup was measured, else perf_score + 1/runtime (ms) for a
// correct kernel, else perf_score. A speedup only counts for a correct kernel, so any correct kernel
// outranks any incorrect one whatever the timings say.
double combined_score(const proto::EvalResult& eval);

// The full EvalResult of one result: perf_score, runtime (candidate median of the first benchmark case,
// ms), runtime_improvement (its speedup, -1 unmeasured), improve_over_baseline (first baseline's median
// over the candidate's, -1 without one), runtime_stats, profiler_data (build resources), combined_score
// and the condensed eval_log.
proto::EvalResult evaluate(const proto::ScoreResult& result);

// Condensed feedback, at most kMaxEvalLogBytes: the compiler's error lines, or the test status with the
// first mismatches, or a timing summary (median, speedup [lo, hi], params).
std::string condensed_eval_log(const proto::ScoreResult& result, int64_t perf_score);

// Why a measurement does not clear the promotion bar (correct, timed, speedup and the lower bound of its
// interval both >= min_speedup); empty when it does.
std::string speedup_shortfall(const proto::ScoreResult& result, double min_speedup);

// Cuts `text` to at most `max_bytes` without splitting a UTF-8 sequence, marking the cut.
std::string truncate_utf8(std::string_view text, size_t max_bytes);

// "BLOCK=256 VEC=4" (map order); "" without params.
std::string params_string(const std::map<std::string, std::string>& params);

}  // namespace kiln::archive
