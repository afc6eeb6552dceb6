// What handling one score job decides before it is committed (engine.cc commits it with the job id),
// and the pieces every follow-up job is made of.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "campaign_store.h"
#include "kiln/scorer/campaign_ids.h"
#include "kiln/core/status.h"
#include "kiln/proto/ids.h"
#include "kiln/proto/payloads.h"
#include "kiln/proto/wire.h"
#include "kiln/scorer/engine.h"

namespace kiln::scorer {

struct Effects {
  std::vector<proto::FollowUp> next;  // jobs the broker enqueues with this job's completion
  std::string payload;                // the job's answer (campaign.start: the CampaignInfo)
  std::string campaign_id;            // recorded with the processed job
  bool duplicate = false;             // a repeat of something already recorded: ignored, counted
};

using proto::follow_up;

// A repeated result or start: counted against the campaign, answered without follow-ups.
Status count_duplicate(CampaignStore& store, CampaignRow& c, Effects& fx);

// Whether a campaign's proposer writes from its parent's result (verdict, timing, profile): every
// proposer but the tuner. Such a campaign proposes from evaluated parents only.
bool reads_feedback(const CampaignRow& c);

// Whether a campaign's proposer reads profiler feedback (the want_profile of its jobs): every proposer but
// the tuner, which picks parameters by score alone.
bool reads_profiles(const CampaignRow& c);

// The compile target of a campaign's backend: the configured CUDA arch, or "native" for the CPU.
std::string arch_for(const EngineOptions& options, proto::Backend backend);

proto::TaskRef task_ref(const CampaignRow& c);
// The candidate a program is sent out as (proposal parent, inspiration, compile request).
proto::Candidate candidate_of(const CampaignRow& c, const proto::Program& p, int64_t proposal_index);

}  // namespace kiln::scorer
