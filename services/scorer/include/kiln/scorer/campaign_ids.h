// Names a campaign gives to what it creates. Programs are "<campaign_id>/p<index>" (p0 = program 0, the
// task's kernel as is); jobs are "<program_id>:<stage>", so a job id says which candidate and step it is
// and a resubmission is recognised. A confirmation reuses the compile -> test chain for the same program
// with purpose "confirm" (proto::Purpose), under the *-confirm job ids (proto::job_id).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::scorer {

// Proposers a campaign names (CampaignStart.proposer), and the one program 0 is credited to.
namespace proposer {
inline constexpr std::string_view kTuner = "tuner";
inline constexpr std::string_view kLlm = "llm";
inline constexpr std::string_view kExternal = "external";
inline constexpr std::string_view kProgram0 = "program0";
}  // namespace proposer

// "<campaign_id>/p<index>"
std::string program_id_for(std::string_view campaign_id, int64_t index);
// The campaign a program id belongs to ("" when it is not of the form above).
std::string campaign_of(std::string_view program_id);

// The service a campaign's proposals go to: "tuner" and "llm" -> "propose", "external" ->
// "propose.external" (where authenticated external bridges connect).
std::string_view proposal_service_for(std::string_view proposer);

}  // namespace kiln::scorer
