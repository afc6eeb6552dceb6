#include "kiln/task_ingest/handler.h"

#include <spdlog/spdlog.h>

#include <cctype>

#include "kiln/core/time.h"
#include "kiln/messaging/outcome.h"
#include "kiln/proto/ids.h"
#include "kiln/proto/payloads.h"
#include "kiln/task/task.h"

namespace kiln::task_ingest {

namespace {

constexpr int kSlots = 2;

bool is_proposer_name(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  return true;
}

}  // namespace

IngestHandler::IngestHandler(IngestOptions options, std::shared_ptr<prometheus::Registry> metrics)
    : options_(options), metrics_(metrics ? std::move(metrics) : std::make_shared<prometheus::Registry>()) {
  auto& family = prometheus::BuildCounter()
                     .Name("kiln_tasks_ingested_total")
                     .Help("Task packages submitted, by outcome: accepted or rejected by validation.")
                     .Register(*metrics_);
  accepted_ = &family.Add({{"outcome", "accepted"}});
  rejected_ = &family.Add({{"outcome", "rejected"}});
}

Result<proto::CampaignStart> IngestHandler::campaign_for(const proto::IngestRequest& req) const {
  if (!proto::is_campaign_id(req.campaign_id))
    return invalid_argument("campaign_id must be 1-" + std::to_string(proto::kMaxCampaignIdChars) +
                            " characters of [A-Za-z0-9_.-], got \"" + req.campaign_id + "\"");
  if (!is_proposer_name(req.proposer))
    return invalid_argument("proposer must be a name like tuner or llm, got \"" + req.proposer + "\"");
  KILN_ASSIGN_OR_RETURN(task::TaskSpec spec, task::parse_task(req.files));
  proto::CampaignStart start;
  start.campaign_id = req.campaign_id;
  start.task_id = proto::task_id(req.files);
  start.task_name = spec.name;
  start.budget = req.budget >= 0 ? req.budget : options_.default_budget;
  start.proposer = req.proposer;
  start.max_in_flight = req.max_in_flight > 0 ? req.max_in_flight : options_.default_max_in_flight;
  start.files = req.files;
  if (req.target_speedup < 0 || req.patience < 0)
    return invalid_argument("target_speedup and patience must not be negative");
  start.target_speedup = req.target_speedup;
  start.patience = req.patience;
  start.submitted_at = wall_time_s();
  return start;
}

messaging::JobOutcome IngestHandler::handle(const proto::Job& job) {
  // The submission is the candidate here: a request that cannot be read is its own failure, and the job's
  // error tells the submitter why.
  auto req = proto::decode<proto::IngestRequest>(job.payload.data);
  if (!req.is_ok())
    return answer(messaging::candidate_fault(req.status()).with_context("ingest: cannot decode IngestRequest"));
  return answer(campaign_for(*req));
}

messaging::JobOutcome IngestHandler::answer(Result<proto::CampaignStart> start) {
  if (!start.is_ok()) {
    messaging::JobOutcome out = messaging::JobOutcome::from_status(start.status());
    if (out.outcome == messaging::Outcome::kCandidateFault) {
      rejected_->Increment();
      spdlog::info("rejected a campaign: {}", start.status().message());
    }
    return out;
  }
  accepted_->Increment();
  spdlog::info("campaign {}: task '{}' ({}), budget {}, proposer {}", start->campaign_id, start->task_name,
               start->task_id.substr(0, 12), start->budget, start->proposer);
  std::string payload = proto::encode(*start);
  std::vector<proto::FollowUp> next{proto::FollowUp{
      std::string(proto::svc::kScore), proto::job_id::campaign_start(start->campaign_id), proto::Bytes{payload}, 0}};
  return messaging::JobOutcome::ok(std::move(next), std::move(payload));
}

Result<service::ServiceHandlers> make_ingest_handlers(const service::ServiceContext& ctx) {
  if (ctx.config == nullptr) return invalid_argument("ingest: no config");
  IngestOptions options;
  options.default_budget = ctx.config->scorer.default_budget;
  options.default_max_in_flight = ctx.config->scorer.max_in_flight;
  auto handler = std::make_shared<IngestHandler>(options, ctx.metrics);
  service::ServiceHandlers h;
  h.job = [handler](const proto::Job& job) { return handler->handle(job); };
  h.slots = kSlots;
  h.service = std::string(proto::svc::kIngest);
  return h;
}

}  // namespace kiln::task_ingest
