// Proposals: the next candidates of a running campaign. Proposal i goes to island (i-1) % islands with a
// parent, inspirations and a target cell chosen by that island of the campaign's archive (program 0
// while nothing is scored); "llm" campaigns also get the fittest strategy section and, every
// prompt_evolution_interval proposals, a request to rewrite it. Each proposal is a pending program and a
// job for the proposer's service.
#pragma once

#include <optional>

#include "campaign_archives.h"
#include "campaign_store.h"
#include "follow_ups.h"
#include "kiln/core/status.h"
#include "kiln/scorer/engine.h"
#include "prompt_book.h"

namespace kiln::scorer {

// The screening bar a new candidate's first measurement gets (ProposalRequest.screen_below): the lowest
// per-case lower bound of the campaign's best program, 0 while there is none. A candidate whose interval
// lies below it on a case cannot overtake that program, so it cannot be confirmed and promoted either
// (only a new best is); measuring it to full precision buys nothing.
double screening_bar(const std::optional<proto::Program>& best);

class Proposals {
 public:
  Proposals(CampaignStore& store, CampaignArchives& archives, PromptBook& prompts, const EngineOptions& options)
      : store_(store), archives_(archives), prompts_(prompts), options_(options) {}

  // Issues proposal c.proposed + 1 (c.proposed counts it).
  Status issue(CampaignRow& c, Effects& fx);
  // Keeps max_in_flight candidates of a running campaign moving until it stops proposing.
  Status top_up(CampaignRow& c, Effects& fx);

 private:
  CampaignStore& store_;
  CampaignArchives& archives_;
  PromptBook& prompts_;
  const EngineOptions& options_;
};

}  // namespace kiln::scorer
