// The "score" service: jobs (campaign.start, result, dead, promoted) go to the campaign engine
// (kiln/scorer/engine.h); queries from `kiln status` / `kiln best` are answered from the same archive.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>

#include "kiln/scorer/engine.h"
#include "kiln/core/status.h"
#include "kiln/messaging/handler.h"
#include "kiln/proto/wire.h"
#include "kiln/service/service.h"

namespace kiln::scorer {

// Query methods (Request.method) and their bodies.
namespace method {
inline constexpr std::string_view kCampaigns = "campaigns";  // CampaignQuery -> CampaignList
inline constexpr std::string_view kCampaign = "campaign";    // CampaignQuery -> CampaignInfo
inline constexpr std::string_view kBest = "best";            // CampaignQuery -> BestPrograms
}  // namespace method

class ScorerHandler {
 public:
  // `metrics` may be null (a private registry is used then).
  static Result<std::unique_ptr<ScorerHandler>> open(const std::string& db_path, EngineOptions options,
                                                     std::shared_ptr<prometheus::Registry> metrics);

  // One "score" job, answered by messaging::outcome_for: a busy database kRetry; bad input and a broken
  // archive kDeadLetter (never kCandidateFault); a redelivered job id its first answer. Called on the
  // worker thread.
  messaging::JobOutcome handle_job(const proto::Job& job);
  // A query; called on the I/O thread, concurrently with handle_job (the engine locks).
  Result<std::string> handle_request(const proto::Request& request);

  CampaignEngine& engine() { return *engine_; }

  // The campaign's HTML report (kiln/report/report.h), with the registry entries read from
  // `registry_dir`; not_found for an unknown campaign. Safe to call from any thread.
  Result<std::string> report_html(const std::string& campaign_id, const std::string& registry_dir,
                                  double promotion_bar);

 private:
  ScorerHandler(std::unique_ptr<CampaignEngine> engine, std::shared_ptr<prometheus::Registry> metrics);
  void publish_best_speedups();

  std::unique_ptr<CampaignEngine> engine_;
  std::shared_ptr<prometheus::Registry> metrics_;
  prometheus::Family<prometheus::Gauge>* best_speedup_ = nullptr;
  prometheus::Counter* duplicates_ = nullptr;
  prometheus::Counter* replayed_ = nullptr;
};

// scorer.db_path, relative paths resolved against the state dir.
std::string resolve_db_path(const std::string& db_path, const std::string& state_dir);

// Handler factory for services/scorer/main.cc: opens the archive, one slot, plus the query handler.
Result<service::ServiceHandlers> make_scorer_handlers(const service::ServiceContext& ctx);

}  // namespace kiln::scorer
