// Results: a candidate's outcome at whatever stage it stopped (no code, build failure, test report)
// scored into its program, which joins the campaign's archive; a new best that clears the bar is sent
// for confirmation, early stop is checked, and the place in flight goes to the next proposal. A result
// for a confirmation (purpose "confirm") goes to Promotions instead.
#pragma once

#include <string>
#include <string_view>

#include "campaign_archives.h"
#include "campaign_lifecycle.h"
#include "campaign_store.h"
#include "follow_ups.h"
#include "kiln/core/status.h"
#include "kiln/proto/payloads.h"
#include "kiln/scorer/engine.h"
#include "promotions.h"
#include "prompt_book.h"
#include "proposals.h"
#include "task_specs.h"

namespace kiln::scorer {

class Results {
 public:
  Results(CampaignStore& store, CampaignArchives& archives, TaskSpecs& specs, PromptBook& prompts, Proposals& proposals,
          CampaignLifecycle& lifecycle, Promotions& promotions, const EngineOptions& options)
      : store_(store),
        archives_(archives),
        specs_(specs),
        prompts_(prompts),
        proposals_(proposals),
        lifecycle_(lifecycle),
        promotions_(promotions),
        options_(options) {}

  // Scores result `r` (received as job `job_id`). A second result for the same program is a duplicate.
  Status on_result(std::string_view job_id, proto::ScoreResult r, Effects& fx);
  // Ends the candidate of `r` without a score: recorded with `why`, kept out of the archive (never a
  // parent), and its place in flight given to the next proposal.
  Status on_not_evaluated(const proto::ScoreResult& r, const std::string& why, Effects& fx);

 private:
  // The program a result is about and its campaign.
  struct Subject {
    std::string pid;
    bool confirm = false;  // a confirming measurement, not the program's own evaluation
    CampaignRow campaign;
    ProgramRow program;
  };
  Result<Subject> subject_of(const proto::ScoreResult& r, Effects& fx);

  CampaignStore& store_;
  CampaignArchives& archives_;
  TaskSpecs& specs_;
  PromptBook& prompts_;
  Proposals& proposals_;
  CampaignLifecycle& lifecycle_;
  Promotions& promotions_;
  const EngineOptions& options_;
};

}  // namespace kiln::scorer
