#include "proposals.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

namespace kiln::scorer {

double screening_bar(const std::optional<proto::Program>& best) {
  if (!best) return 0;
  const auto lo = best->eval.runtime_stats.find("min_speedup_lo");
  if (lo == best->eval.runtime_stats.end() || !std::isfinite(lo->second) || lo->second <= 0) return 0;
  return lo->second;
}

Status Proposals::issue(CampaignRow& c, Effects& fx) {
  const int64_t index = c.proposed + 1;
  const std::string pid = program_id_for(c.id, index);
  const uint64_t seed = seed_from(c.id + "#" + std::to_string(index));
  Rng rng(seed);

  KILN_ASSIGN_OR_RETURN(archive::Archive * archive, archives_.get(c.id));
  // Proposals go round the islands, so each island evolves its own line.
  const int64_t islands = std::max<int64_t>(options_.map_elites.islands, 1);
  const int64_t island = (index - 1) % islands;
  archive::Selection sel = archive->select(rng, island);
  std::optional<proto::Program> parent = std::move(sel.parent);
  if (!parent) {
    // Nothing scored yet: every early proposal starts from program 0.
    KILN_ASSIGN_OR_RETURN(auto p0, store_.load_program(program_id_for(c.id, 0)));
    if (!p0) return internal_error("campaign " + c.id + ": program 0 is missing");
    parent = std::move(p0->record);
    sel.parent_cell = archive->cell_of(*parent);
    sel.target_cell = sel.parent_cell;
    sel.mode = "program0";
  }

  proto::Program child;
  child.id = pid;
  child.parent_id = parent->id;
  child.generation = parent->generation + 1;
  child.iteration_found = index;
  child.language = std::string(proto::kernel_language(c.backend));
  child.task = task_ref(c);
  child.metadata["proposer"] = c.proposer;
  child.metadata["campaign_id"] = c.id;
  child.metadata["island"] = std::to_string(island);
  child.metadata["selection"] = sel.mode;
  if (!sel.target_cell.empty()) child.metadata["target_cell"] = sel.target_cell;
  KILN_RETURN_IF_ERROR(store_.insert_program(c, child, index, c.proposer));

  proto::ProposalRequest req;
  req.parent = candidate_of(c, *parent, parent->iteration_found);
  req.program_id = pid;
  req.proposal_index = index;
  req.proposer = c.proposer;
  req.parent_eval_log = parent->eval.eval_log;
  req.seed = static_cast<int64_t>(seed >> 1);  // non-negative
  if (c.proposer == proposer::kExternal)
    req.files = c.files;
  else
    service::attach_task(*options_.tasks, c.files, &req.files, &req.task_blob);
  req.island = island;
  req.budget = c.budget;
  req.tuner_blocks = options_.tuner_blocks;
  if (options_.screen_by_best) req.screen_below = screening_bar(archive->best());
  req.want_profile = reads_profiles(c);
  req.parent_cell = sel.parent_cell;
  req.target_cell = sel.target_cell;
  for (const proto::Program& insp : sel.inspirations) {
    proto::Inspiration i;
    i.cand = candidate_of(c, insp, insp.iteration_found);
    i.eval_log = insp.eval.eval_log;
    i.combined_score = insp.eval.combined_score;
    i.cell = archive->cell_of(insp);
    req.inspirations.push_back(std::move(i));
  }
  if (c.proposer == proposer::kLlm) {
    KILN_ASSIGN_OR_RETURN(req.strategy, prompts_.fittest(c.id));
    req.evolve_prompt = options_.prompt_evolution_interval > 0 && index % options_.prompt_evolution_interval == 0;
  }
  fx.next.push_back(follow_up(proposal_service_for(c.proposer), pid + ":propose", proto::encode(req)));

  ++c.proposed;
  return store_.save_proposed(c);
}

Status Proposals::top_up(CampaignRow& c, Effects& fx) {
  if (c.state != kRunning) return Status::ok();
  KILN_ASSIGN_OR_RETURN(int64_t in_flight, store_.pending_programs(c.id));
  while (c.proposing() && in_flight < c.max_in_flight) {
    KILN_RETURN_IF_ERROR(issue(c, fx));
    ++in_flight;
  }
  return Status::ok();
}

}  // namespace kiln::scorer
