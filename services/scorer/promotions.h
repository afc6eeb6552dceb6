// Confirmation and promotion (DESIGN §7). A program that becomes the campaign's best and clears the
// promotion bar is measured again by an independent test job (preferably on another tester); when the
// confirming measurement clears the bar too, the promoter is asked to register it. Each program has at
// most one promotion row: confirming -> promoting -> promoted | refused, or not_confirmed / failed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "campaign_lifecycle.h"
#include "campaign_store.h"
#include "follow_ups.h"
#include "kiln/core/status.h"
#include "kiln/proto/payloads.h"
#include "kiln/scorer/engine.h"
#include "task_specs.h"

namespace kiln::scorer {

class Promotions {
 public:
  Promotions(CampaignStore& store, TaskSpecs& specs, CampaignLifecycle& lifecycle, const EngineOptions& options)
      : store_(store), specs_(specs), lifecycle_(lifecycle), options_(options) {}

  // Asks for the confirming measurement of `p`, once per program.
  Status request_confirmation(CampaignRow& c, const proto::Program& p, int64_t proposal_index, Effects& fx);
  // The confirming measurement of program `pid`: promote it, or record why not.
  Status on_confirmation(std::string_view job_id, CampaignRow& c, const std::string& pid, const proto::ScoreResult& r,
                         Effects& fx);
  // The confirming measurement could not be made: the program's own score stands, unconfirmed.
  Status on_confirmation_not_made(CampaignRow& c, const std::string& pid, const std::string& why, Effects& fx);
  // The promoter's answer ("promoted" payload).
  Status on_promoted(std::string_view payload, Effects& fx);
  // A promote job that died: the promotion failed with `note`.
  Status on_promote_dead(const proto::PromoteRequest& req, const std::string& note, Effects& fx);

 private:
  CampaignStore& store_;
  TaskSpecs& specs_;
  CampaignLifecycle& lifecycle_;
  const EngineOptions& options_;
};

}  // namespace kiln::scorer
