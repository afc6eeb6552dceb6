#include "follow_ups.h"

#include <utility>

namespace kiln::scorer {

Status count_duplicate(CampaignStore& store, CampaignRow& c, Effects& fx) {
  fx.duplicate = true;
  return store.add_duplicate(c);
}

bool reads_feedback(const CampaignRow& c) { return c.proposer != proposer::kTuner; }

bool reads_profiles(const CampaignRow& c) { return reads_feedback(c); }

std::string arch_for(const EngineOptions& options, proto::Backend backend) {
  return backend == proto::Backend::kCuda ? options.cuda_arch : std::string("native");
}

proto::TaskRef task_ref(const CampaignRow& c) {
  proto::TaskRef t;
  t.task_id = c.task_id;
  t.name = c.task_name;
  t.op = c.op;
  t.backend = c.backend;
  t.dtype = c.dtype;
  return t;
}

proto::Candidate candidate_of(const CampaignRow& c, const proto::Program& p, int64_t proposal_index) {
  proto::Candidate cand;
  cand.campaign_id = c.id;
  cand.program_id = p.id;
  cand.parent_id = p.parent_id;
  cand.generation = p.generation;
  cand.proposal_index = proposal_index;
  if (auto it = p.metadata.find("proposer"); it != p.metadata.end()) cand.proposer = it->second;
  cand.code = p.code;
  cand.params = p.template_parameters;
  if (auto it = p.metadata.find("notes"); it != p.metadata.end()) cand.notes = it->second;
  return cand;
}

}  // namespace kiln::scorer
