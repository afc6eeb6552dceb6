// A campaign's lifecycle: started from a validated task package with program 0 and the first wave of
// proposals; stopped early at the target speedup or after `patience` scored proposals without a new best;
// done once it proposes no more and nothing it started (a program, a confirmation, a promotion) is
// pending.
#pragma once

#include <optional>
#include <string_view>

#include "campaign_store.h"
#include "follow_ups.h"
#include "kiln/core/status.h"
#include "kiln/proto/payloads.h"
#include "kiln/scorer/engine.h"
#include "proposals.h"
#include "queries.h"
#include "task_specs.h"

namespace kiln::scorer {

class CampaignLifecycle {
 public:
  CampaignLifecycle(CampaignStore& store, TaskSpecs& specs, Proposals& proposals, Queries& queries,
                    const EngineOptions& options)
      : store_(store), specs_(specs), proposals_(proposals), queries_(queries), options_(options) {}

  // campaign.start: records the campaign and program 0, compiles program 0 and issues the first
  // proposals beside it; answers with the campaign's info. A campaign already known is a duplicate.
  Status start(std::string_view payload, Effects& fx);
  // campaign.cancel (`kiln cancel`): no more proposals; what is in flight finishes. Answers with the
  // campaign's info; an unknown campaign is kNotFound.
  Status cancel(std::string_view payload, Effects& fx);
  // Sets the stop reason once `best` (the campaign's best so far) reaches the target speedup, or the
  // campaign has gone `patience` scored programs without a new best.
  Status check_early_stop(CampaignRow& c, const std::optional<proto::Program>& best);
  // Marks a running campaign done when it proposes no more and nothing is pending.
  Status maybe_finish(CampaignRow& c);

 private:
  CampaignStore& store_;
  TaskSpecs& specs_;
  Proposals& proposals_;
  Queries& queries_;
  const EngineOptions& options_;
};

}  // namespace kiln::scorer
