#include "kiln/proto/ids.h"

#include <cctype>

namespace kiln::proto {

namespace {

constexpr std::string_view kCppLanguage = "cpp";
constexpr std::string_view kCudaLanguage = "cuda";
constexpr std::string_view kCppExtension = "cpp";
constexpr std::string_view kCudaExtension = "cu";

constexpr std::string_view kDeadPrefix = "dead:";
constexpr std::string_view kCampaignPrefix = "campaign:";
constexpr std::string_view kCampaignStartSuffix = ":start";
constexpr std::string_view kCampaignCancelSuffix = ":cancel";
constexpr std::string_view kIngestPrefix = "ingest:";

// Every step, in the order of job_id::Step, with the word after the ':'.
struct StepName {
  job_id::Step step;
  std::string_view word;
};
constexpr StepName kSteps[] = {
    {job_id::Step::kCompile, "compile"}, {job_id::Step::kCompileConfirm, "compile-confirm"},
    {job_id::Step::kTest, "test"},       {job_id::Step::kTestConfirm, "test-confirm"},
    {job_id::Step::kScore, "score"},     {job_id::Step::kScoreConfirm, "score-confirm"},
    {job_id::Step::kPromote, "promote"}, {job_id::Step::kPromoted, "promoted"},
};

std::string concat(std::string_view a, std::string_view b, std::string_view c = {}) {
  std::string out;
  out.reserve(a.size() + b.size() + c.size());
  out.append(a).append(b).append(c);
  return out;
}

}  // namespace

bool is_campaign_id(std::string_view id) {
  if (id.empty() || id.size() > kMaxCampaignIdChars) return false;
  for (char c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  return true;
}

std::string_view kernel_language(Backend backend) { return backend == Backend::kCuda ? kCudaLanguage : kCppLanguage; }

std::string_view source_extension(Backend backend) {
  return backend == Backend::kCuda ? kCudaExtension : kCppExtension;
}

namespace job_id {

std::string of(std::string_view program_id, Step step) {
  for (const StepName& s : kSteps)
    if (s.step == step) return concat(program_id, ":", s.word);
  return std::string(program_id);  // unreachable: every step is in kSteps
}

std::string compile(std::string_view program_id) { return of(program_id, Step::kCompile); }
std::string compile_confirm(std::string_view program_id) { return of(program_id, Step::kCompileConfirm); }
std::string test(std::string_view program_id) { return of(program_id, Step::kTest); }
std::string test_confirm(std::string_view program_id) { return of(program_id, Step::kTestConfirm); }
std::string score(std::string_view program_id) { return of(program_id, Step::kScore); }
std::string score_confirm(std::string_view program_id) { return of(program_id, Step::kScoreConfirm); }
std::string promote(std::string_view program_id) { return of(program_id, Step::kPromote); }

std::string compile(std::string_view program_id, Purpose purpose) {
  return of(program_id, purpose == Purpose::kConfirm ? Step::kCompileConfirm : Step::kCompile);
}
std::string test(std::string_view program_id, Purpose purpose) {
  return of(program_id, purpose == Purpose::kConfirm ? Step::kTestConfirm : Step::kTest);
}
std::string score(std::string_view program_id, Purpose purpose) {
  return of(program_id, purpose == Purpose::kConfirm ? Step::kScoreConfirm : Step::kScore);
}
std::string promoted(std::string_view program_id) { return of(program_id, Step::kPromoted); }

std::string dead_letter(std::string_view job_id) { return concat(kDeadPrefix, job_id); }

std::optional<std::string_view> dead_letter_of(std::string_view id) {
  if (!id.starts_with(kDeadPrefix)) return std::nullopt;
  return id.substr(kDeadPrefix.size());
}

std::string campaign_start(std::string_view campaign_id) {
  return concat(kCampaignPrefix, campaign_id, kCampaignStartSuffix);
}

std::string campaign_cancel(std::string_view campaign_id) {
  return concat(kCampaignPrefix, campaign_id, kCampaignCancelSuffix);
}

std::string ingest(std::string_view campaign_id) { return concat(kIngestPrefix, campaign_id); }

std::optional<ProgramJob> parse(std::string_view id) {
  if (id.starts_with(kDeadPrefix) || id.starts_with(kCampaignPrefix) || id.starts_with(kIngestPrefix))
    return std::nullopt;
  const size_t colon = id.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  const std::string_view word = id.substr(colon + 1);
  for (const StepName& s : kSteps)
    if (s.word == word) return ProgramJob{id.substr(0, colon), s.step};
  return std::nullopt;
}

}  // namespace job_id

}  // namespace kiln::proto
