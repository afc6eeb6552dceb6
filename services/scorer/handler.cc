#include "kiln/scorer/handler.h"

#include <utility>

#include "kiln/core/files.h"
#include "kiln/proto/payloads.h"
#include "kiln/report/report.h"

namespace kiln::scorer {

namespace {

// An empty body asks for the defaults (all campaigns, the top 5).
Result<proto::CampaignQuery> query_of(const proto::Request& request) {
  if (request.body.data.empty()) return proto::CampaignQuery{};
  auto q = proto::decode<proto::CampaignQuery>(request.body.data);
  if (!q.is_ok()) return q.status().with_context("request " + request.method);
  return q;
}

// No score job is a candidate's fault: its verdict was judged before it got here. Input the engine refuses
// (it does not decode, it names an unknown campaign or program) is the job's own, dead-lettered; a busy
// database is given back; a broken archive is dead-lettered, as outcome_for reads kInternal.
Status whose_fault(const Status& status) {
  if (messaging::outcome_for(status) == messaging::Outcome::kCandidateFault) return messaging::job_fault(status);
  return status;
}

}  // namespace

ScorerHandler::ScorerHandler(std::unique_ptr<CampaignEngine> engine, std::shared_ptr<prometheus::Registry> metrics)
    : engine_(std::move(engine)), metrics_(metrics ? std::move(metrics) : std::make_shared<prometheus::Registry>()) {
  best_speedup_ = &prometheus::BuildGauge()
                       .Name("kiln_campaign_best_speedup")
                       .Help("Best correct speedup over the reference found so far, per task")
                       .Register(*metrics_);
  duplicates_ = &prometheus::BuildCounter()
                     .Name("kiln_scorer_duplicate_results_total")
                     .Help("Results ignored because their program was already scored")
                     .Register(*metrics_)
                     .Add({});
  replayed_ = &prometheus::BuildCounter()
                   .Name("kiln_scorer_replayed_jobs_total")
                   .Help("Redelivered score jobs answered from the processed-jobs table")
                   .Register(*metrics_)
                   .Add({});
}

Result<std::unique_ptr<ScorerHandler>> ScorerHandler::open(const std::string& db_path, EngineOptions options,
                                                           std::shared_ptr<prometheus::Registry> metrics) {
  KILN_ASSIGN_OR_RETURN(auto engine, CampaignEngine::open(db_path, std::move(options)));
  std::unique_ptr<ScorerHandler> handler(new ScorerHandler(std::move(engine), std::move(metrics)));
  // After a restart the gauge shows what the archive already holds.
  handler->publish_best_speedups();
  return handler;
}

void ScorerHandler::publish_best_speedups() {
  auto best = engine_->best_speedup_by_task();
  if (!best.is_ok()) return;  // a gap in a graph, never a failed job
  for (const auto& [task, speedup] : *best) best_speedup_->Add({{"task", task}}).Set(speedup);
}

messaging::JobOutcome ScorerHandler::handle_job(const proto::Job& job) {
  auto handled = engine_->handle_job(job.job_id, job.payload.data);
  if (!handled.is_ok()) return messaging::JobOutcome::from_status(whose_fault(handled.status()));
  if (handled->replayed) replayed_->Increment();
  if (handled->duplicate) duplicates_->Increment();

  if (!handled->replayed && handled->answer.outcome == messaging::Outcome::kDone) publish_best_speedups();
  return std::move(handled->answer);
}

Result<std::string> ScorerHandler::handle_request(const proto::Request& request) {
  KILN_ASSIGN_OR_RETURN(proto::CampaignQuery query, query_of(request));
  if (request.method == method::kCampaigns) {
    KILN_ASSIGN_OR_RETURN(proto::CampaignList list, engine_->campaigns(query));
    return proto::encode(list);
  }
  if (request.method == method::kCampaign) {
    if (query.campaign_id.empty()) return invalid_argument("request campaign: no campaign id");
    KILN_ASSIGN_OR_RETURN(proto::CampaignInfo info, engine_->campaign(query.campaign_id));
    return proto::encode(info);
  }
  if (request.method == method::kBest) {
    if (query.campaign_id.empty()) return invalid_argument("request best: no campaign id");
    KILN_ASSIGN_OR_RETURN(proto::BestPrograms best, engine_->best(query));
    return proto::encode(best);
  }
  return invalid_argument("unknown method '" + request.method + "' (expected campaigns, campaign or best)");
}

std::string resolve_db_path(const std::string& db_path, const std::string& state_dir) {
  if (db_path.empty() || db_path == ":memory:" || db_path.front() == '/' || state_dir.empty()) return db_path;
  return state_dir + (state_dir.back() == '/' ? "" : "/") + db_path;
}

Result<std::string> ScorerHandler::report_html(const std::string& campaign_id, const std::string& registry_dir,
                                               double promotion_bar) {
  KILN_ASSIGN_OR_RETURN(proto::BestPrograms best,
                        engine_->best(proto::CampaignQuery{campaign_id, report::kMaxReportPrograms}));
  return report::render_html(report::make_input(std::move(best), registry_dir, promotion_bar));
}

Result<service::ServiceHandlers> make_scorer_handlers(const service::ServiceContext& ctx) {
  if (!ctx.config) return invalid_argument("scorer: no configuration");
  const config::KilnConfig& cfg = *ctx.config;
  EngineOptions options;
  options.min_speedup = cfg.scorer.min_speedup;
  options.cuda_arch = cfg.compiler.cuda_arch;
  options.default_max_in_flight = cfg.scorer.max_in_flight;
  const config::ArchiveConfig& ac = cfg.scorer.archive;
  options.archive = ac.kind;
  options.elites.capacity = static_cast<size_t>(ac.elite_capacity);
  options.map_elites.dimensions = ac.dimensions;
  options.map_elites.islands = ac.islands;
  options.map_elites.migration_interval = ac.migration_interval;
  options.map_elites.exploration_ratio = ac.exploration_ratio;
  options.map_elites.exploitation_ratio = ac.exploitation_ratio;
  options.map_elites.inspirations = ac.inspirations;
  options.target_speedup = cfg.scorer.campaign.target_speedup;
  options.patience = cfg.scorer.campaign.patience;
  options.prompt_evolution_interval = cfg.scorer.campaign.prompt_evolution_interval;
  options.tuner_blocks = cfg.scorer.campaign.tuner_block_sampling == 1;
  options.screen_by_best = cfg.scorer.campaign.screen_by_best == 1;
  if (ctx.tasks) options.tasks = ctx.tasks;
  const std::string db_path = resolve_db_path(cfg.scorer.db_path, ctx.state_dir);
  if (size_t slash = db_path.rfind('/'); slash != std::string::npos && slash > 0)
    KILN_RETURN_IF_ERROR(make_dirs(db_path.substr(0, slash)));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<ScorerHandler> opened, ScorerHandler::open(db_path, options, ctx.metrics));
  std::shared_ptr<ScorerHandler> handler = std::move(opened);

  service::ServiceHandlers h;
  h.job = [handler](const proto::Job& job) { return handler->handle_job(job); };
  h.request = [handler](const proto::Request& request) { return handler->handle_request(request); };
  // One slot: the engine serializes jobs anyway, and parent choices depend on the order results arrive.
  h.slots = 1;
  h.service = std::string(proto::svc::kScore);
  // Each campaign's report, for a browser pointed at this port (kiln report writes the same page).
  const std::string registry_dir = cfg.promoter.registry_dir;
  const double bar = cfg.promoter.min_speedup;
  h.pages.push_back({R"(/campaigns/([A-Za-z0-9._:-]{1,128})/report)", "text/html; charset=utf-8",
                     [handler, registry_dir, bar](const std::vector<std::string>& captures) -> Result<std::string> {
                       return handler->report_html(captures.at(0), registry_dir, bar);
                     }});
  return h;
}

}  // namespace kiln::scorer
