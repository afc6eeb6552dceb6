// Typed names that travel as strings: backends, stages, purposes, test statuses and job ids. Message structs hold the
// enums; the codec (codec.h WireWords) writes each as its word and reads it back, so the words are spelled
// here and nowhere else and a reader past decode() never compares strings.
//
// Job ids are deterministic, so a duplicate follow-up is dropped by the broker:
//   "<program_id>:compile", ":test", ":score", ":promote", ":promoted"  one step of a candidate
//   "<program_id>:compile-confirm", ":test-confirm", ":score-confirm"   the steps of its confirmation
//   "dead:<job_id>"                                                      the DeadLetter of a job
//   "campaign:<campaign_id>:start"                                       a campaign's first score job
//   "campaign:<campaign_id>:cancel"                                      `kiln cancel` of a campaign
//   "ingest:<campaign_id>"                                               a campaign's ingest job
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "kiln/core/status.h"
#include "kiln/proto/codec.h"

namespace kiln::proto {

// The hardware a task's kernel runs on; a tester serves one ("test.cpu", "test.cuda").
enum class Backend { kCpu, kCuda };

template <>
struct WireWords<Backend> {
  static constexpr std::string_view kWhat = "backend";
  static constexpr std::pair<Backend, std::string_view> kWords[] = {{Backend::kCpu, "cpu"}, {Backend::kCuda, "cuda"}};
};

// "cpu" | "cuda"
inline std::string_view name(Backend backend) { return word_of(backend); }
// The backend a wire or file string names; anything else (the empty string too) is invalid_argument.
inline Result<Backend> parse_backend(std::string_view text) { return parse_word<Backend>(text); }
// The language of a backend's kernels (Program.language, a kernel's code fence): "cpp" | "cuda".
std::string_view kernel_language(Backend backend);
// The extension of a backend's kernel sources, without the dot (PromoteRequest.source_ext): "cpp" | "cu".
std::string_view source_extension(Backend backend);

// Where a candidate stopped (ScoreResult.stage): no code came of its proposal, its build failed, or it
// reached the tester, whatever the verdict.
enum class Stage { kPropose, kCompile, kTest };

template <>
struct WireWords<Stage> {
  static constexpr std::string_view kWhat = "stage";
  static constexpr std::pair<Stage, std::string_view> kWords[] = {
      {Stage::kPropose, "propose"}, {Stage::kCompile, "compile"}, {Stage::kTest, "test"}};
};

// "propose" | "compile" | "test"
inline std::string_view name(Stage stage) { return word_of(stage); }

// What a candidate's compile -> test -> score chain measures (CompileRequest, TestRequest and ScoreResult
// .purpose): its first evaluation, or the independent confirming measurement of a program that may be
// promoted. The purpose alone says which: a confirmation keeps its program's id, and its jobs are the
// *-confirm steps below. A tester measures a confirmation in full (never screened nor profiled).
enum class Purpose { kEval, kConfirm };

template <>
struct WireWords<Purpose> {
  static constexpr std::string_view kWhat = "purpose";
  static constexpr std::pair<Purpose, std::string_view> kWords[] = {{Purpose::kEval, "eval"},
                                                                    {Purpose::kConfirm, "confirm"}};
};

// "eval" | "confirm"
inline std::string_view name(Purpose purpose) { return word_of(purpose); }

// A tester's verdict on a candidate (TestReport.status), in the order of the archive's perf_score
// (DESIGN §6): correct (5); wrong values (4); wrong shape or non-finite (3); crashed, timed out or would
// not load: no result (2). kEvaluatorError is not a verdict on the candidate: the evaluation child could
// not evaluate it here (the task or the reference will not load or run, out of memory, no device). The
// tester answers the job "retry" with the message; a report with this status never reaches the scorer.
enum class TestStatus {
  kOk,
  kMismatch,
  kInputModified,
  kWrongShape,
  kNonFinite,
  kCrashed,
  kTimedOut,
  kLoadFailed,
  kEvaluatorError,
};

template <>
struct WireWords<TestStatus> {
  static constexpr std::string_view kWhat = "test status";
  static constexpr std::pair<TestStatus, std::string_view> kWords[] = {
      {TestStatus::kOk, "ok"},
      {TestStatus::kMismatch, "mismatch"},
      {TestStatus::kInputModified, "input_modified"},
      {TestStatus::kWrongShape, "wrong_shape"},
      {TestStatus::kNonFinite, "nonfinite"},
      {TestStatus::kCrashed, "crashed"},
      {TestStatus::kTimedOut, "timed_out"},
      {TestStatus::kLoadFailed, "load_failed"},
      {TestStatus::kEvaluatorError, "evaluator_error"},
  };
};

// "ok" | "mismatch" | "input_modified" | "wrong_shape" | "nonfinite" | "crashed" | "timed_out" |
// "load_failed" | "evaluator_error"
inline std::string_view name(TestStatus status) { return word_of(status); }
// The test status a wire or file string names; anything else (the empty string too) is invalid_argument.
inline Result<TestStatus> parse_test_status(std::string_view text) { return parse_word<TestStatus>(text); }

// Campaign ids become parts of job ids ("campaign:<id>:start") and program ids ("<id>/p3"), so they are
// 1-kMaxCampaignIdChars characters of [A-Za-z0-9_.-]: none of the separators those use.
inline constexpr size_t kMaxCampaignIdChars = 128;
bool is_campaign_id(std::string_view id);

namespace job_id {

std::string compile(std::string_view program_id);          // "<program_id>:compile"
std::string compile_confirm(std::string_view program_id);  // "<program_id>:compile-confirm"
std::string test(std::string_view program_id);             // "<program_id>:test"
std::string test_confirm(std::string_view program_id);     // "<program_id>:test-confirm"
std::string score(std::string_view program_id);            // "<program_id>:score"
std::string score_confirm(std::string_view program_id);    // "<program_id>:score-confirm"
// The compile, test or score job of `program_id` for `purpose` (a confirmation's are the *-confirm ones).
std::string compile(std::string_view program_id, Purpose purpose);
std::string test(std::string_view program_id, Purpose purpose);
std::string score(std::string_view program_id, Purpose purpose);
std::string promote(std::string_view program_id);   // "<program_id>:promote"
std::string promoted(std::string_view program_id);  // "<program_id>:promoted"

// "dead:<job_id>": the id of the "score" job that carries the DeadLetter for `job_id`, the same whoever
// dead-letters the job (the broker past max_attempts, or the worker itself), so the scorer hears of one
// death once.
std::string dead_letter(std::string_view job_id);
// The job a dead letter's id names ("dead:c1/p3:test" -> "c1/p3:test"); nullopt when `id` is not one.
std::optional<std::string_view> dead_letter_of(std::string_view id);

// "campaign:<campaign_id>:start"
std::string campaign_start(std::string_view campaign_id);
// "campaign:<campaign_id>:cancel"
std::string campaign_cancel(std::string_view campaign_id);
// "ingest:<campaign_id>"
std::string ingest(std::string_view campaign_id);

// The steps of a candidate that a job id names after its program id.
enum class Step { kCompile, kCompileConfirm, kTest, kTestConfirm, kScore, kScoreConfirm, kPromote, kPromoted };

// One candidate's job id taken apart: "c1/p3:score-confirm" -> {"c1/p3", kScoreConfirm}.
struct ProgramJob {
  std::string_view program_id;
  Step step;
};

// "<program_id>:<step>" for `step`.
std::string of(std::string_view program_id, Step step);
// The program and step a candidate's job id names (the last ':' splits them); nullopt for any other id
// (a dead letter, a campaign's start, an ingest job, an unknown step), or an empty program id.
std::optional<ProgramJob> parse(std::string_view id);

}  // namespace job_id

}  // namespace kiln::proto
