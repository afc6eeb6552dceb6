// Meta-prompts (DESIGN §6): the strategy sections of "llm" campaigns co-evolve with the kernels. Each
// strategy is recorded the first time a program made with it is scored; its fitness is the best score it
// produced, and the last scores are kept for the proposer that rewrites it.
#pragma once

#include <string>

#include "campaign_store.h"
#include "kiln/core/status.h"
#include "kiln/proto/payloads.h"

namespace kiln::scorer {

class PromptBook {
 public:
  explicit PromptBook(CampaignStore& store) : store_(store) {}

  // The strategy a proposal uses: the campaign's fittest (ties: the oldest); none before the first.
  Result<proto::PromptStrategy> fittest(const std::string& campaign_id);
  // Credits a scored program to the strategy that produced it (metadata "prompt_id"), recording the
  // strategy with `text` on first sight. Nothing for a program made without one.
  Status credit(const std::string& campaign_id, const proto::Program& p, const std::string& text);

 private:
  CampaignStore& store_;
};

}  // namespace kiln::scorer
