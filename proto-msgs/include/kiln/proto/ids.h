// Typed names that travel as strings: backends, ScoreResult stages and job ids. Messages keep their string
// fields (the wire format does not change); code parses a string once where it reads a message and names
// the value where it writes one, so the strings themselves are spelled here and nowhere else.
//
// Job ids are deterministic, so a duplicate follow-up is dropped by the broker:
//   "<program_id>:compile", ":test", ":score", ":promote", ":promoted"  one step of a candidate
//   "<program_id>:compile-confirm", ":score-confirm"                    the steps of its confirmation
//   "dead:<job_id>"                                                      the DeadLetter of a job
//   "campaign:<campaign_id>:start"                                       a campaign's first score job
//   "campaign:<campaign_id>:cancel"                                      `kiln cancel` of a campaign
//   "ingest:<campaign_id>"                                               a campaign's ingest job
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kiln/core/status.h"

namespace kiln::proto {

// The hardware a task's kernel runs on; a tester serves one ("test.cpu", "test.cuda").
enum class Backend { kCpu, kCuda };

// "cpu" | "cuda"
std::string_view name(Backend backend);
// The backend a wire or file string names; anything else (the empty string too) is invalid_argument.
Result<Backend> parse_backend(std::string_view text);
// Whether `text` names `backend` (false for any other string, unknown ones too).
inline bool is_backend(std::string_view text, Backend backend) { return text == name(backend); }
// The language of a backend's kernels (Program.language, a kernel's code fence): "cpp" | "cuda".
std::string_view kernel_language(Backend backend);
// The extension of a backend's kernel sources, without the dot (PromoteRequest.source_ext): "cpp" | "cu".
std::string_view source_extension(Backend backend);

// Where a candidate stopped (ScoreResult.stage): no code came of its proposal, its build failed, or it
// reached the tester, whatever the verdict.
enum class Stage { kPropose, kCompile, kTest };

// "propose" | "compile" | "test"
std::string_view name(Stage stage);
// The stage a ScoreResult names; anything else is invalid_argument.
Result<Stage> parse_stage(std::string_view text);
// Whether `text` names `stage` (false for any other string, unknown ones too).
inline bool is_stage(std::string_view text, Stage stage) { return text == name(stage); }

// Campaign ids become parts of job ids ("campaign:<id>:start") and program ids ("<id>/p3"), so they are
// 1-kMaxCampaignIdChars characters of [A-Za-z0-9_.-]: none of the separators those use.
inline constexpr size_t kMaxCampaignIdChars = 128;
bool is_campaign_id(std::string_view id);

// A confirming measurement reuses the compile -> test chain with the program id "<program_id>#confirm"
// (kConfirmSuffix in wire.h): the scorer names it so, and a tester measures such a job in full.
namespace program_id {
// "<program_id>#confirm"
std::string confirmation(std::string_view program_id);
// The program a confirmation's id stands for ("c1/p3#confirm" -> "c1/p3"); nullopt when `id` is not one.
std::optional<std::string_view> confirmed(std::string_view id);
}  // namespace program_id

namespace job_id {

std::string compile(std::string_view program_id);          // "<program_id>:compile"
std::string compile_confirm(std::string_view program_id);  // "<program_id>:compile-confirm"
std::string test(std::string_view program_id);             // "<program_id>:test"
std::string score(std::string_view program_id);            // "<program_id>:score"
std::string score_confirm(std::string_view program_id);    // "<program_id>:score-confirm"
std::string promote(std::string_view program_id);          // "<program_id>:promote"
std::string promoted(std::string_view program_id);         // "<program_id>:promoted"

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
enum class Step { kCompile, kCompileConfirm, kTest, kScore, kScoreConfirm, kPromote, kPromoted };

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
