#include "kiln/llm_bridge/handler.h"

#include <utility>

#include "kiln/llm_bridge/llm_proposer.h"
#include "kiln/llm_bridge/metrics.h"
#include "kiln/messaging/outcome.h"
#include "kiln/proto/ids.h"
#include "kiln/proto/payloads.h"
#include "kiln/task/task.h"

namespace kiln::llm_bridge {

namespace {

constexpr std::string_view kDefaultProposer = "tuner";
// The model label of requests naming no registered proposer: the name itself is caller-chosen and
// would make the label set unbounded.
constexpr std::string_view kUnknownModel = "unknown";

using proto::follow_up;

std::string campaign_of(const proto::ProposalRequest& req) {
  if (!req.parent.campaign_id.empty()) return req.parent.campaign_id;
  size_t pos = req.program_id.rfind("/p");
  return pos == std::string::npos ? std::string() : req.program_id.substr(0, pos);
}

}  // namespace

ProposeHandler::ProposeHandler(ProposeOptions options, std::shared_ptr<prometheus::Registry> metrics)
    : options_(std::move(options)), metrics_(metrics ? std::move(metrics) : std::make_shared<prometheus::Registry>()) {
  requests_ = &llm_requests_family(*metrics_);
  tokens_ = &llm_tokens_family(*metrics_);
}

void ProposeHandler::add(const std::string& name, std::unique_ptr<Proposer> proposer) {
  // Create both series up front so dashboards see zeros rather than gaps.
  requests_->Add({{"model", proposer->model()}, {"outcome", "ok"}});
  requests_->Add({{"model", proposer->model()}, {"outcome", "error"}});
  proposers_[name] = std::move(proposer);
}

void ProposeHandler::account(const ProposalInfo& info, std::map<std::string, std::string>& metadata) {
  for (const auto& [k, v] : info.metadata) metadata[k] = v;
  if (info.prompt_tokens > 0 || info.completion_tokens > 0) {
    tokens_->Add({{"model", info.model}, {"direction", "prompt"}}).Increment(static_cast<double>(info.prompt_tokens));
    tokens_->Add({{"model", info.model}, {"direction", "completion"}})
        .Increment(static_cast<double>(info.completion_tokens));
    metadata["prompt_tokens"] = std::to_string(info.prompt_tokens);
    metadata["completion_tokens"] = std::to_string(info.completion_tokens);
  }
}

messaging::JobOutcome ProposeHandler::propose_failed(const proto::ProposalRequest& req, const ProposalInfo& info,
                                                     const Status& fault) {
  if (!info.requests_counted) requests_->Add({{"model", info.model}, {"outcome", "error"}}).Increment();
  auto no_code = [&](const Status&) {
    proto::ScoreResult r;
    r.cand.campaign_id = campaign_of(req);
    r.cand.program_id = req.program_id;
    r.cand.parent_id = req.parent.program_id;
    r.cand.generation = req.parent.generation + 1;
    r.cand.proposal_index = req.proposal_index;
    r.cand.proposer = req.proposer;
    r.stage = proto::Stage::kPropose;
    r.error = fault.message();
    r.cand.raw_llm_code = info.raw_reply;  // what the model said, when nothing usable could be taken from it
    account(info, r.cand.metadata);
    return std::vector<proto::FollowUp>{
        follow_up(proto::svc::kScore, proto::job_id::score(req.program_id), proto::encode(r))};
  };
  messaging::JobOutcome out = messaging::JobOutcome::from_status(fault.with_context("propose"), no_code);
  if (out.outcome != messaging::Outcome::kCandidateFault) {
    std::map<std::string, std::string> unrecorded;  // tokens spent on a proposal that is not scored still count
    account(info, unrecorded);
  }
  return out;
}

messaging::JobOutcome ProposeHandler::handle(const proto::Job& job) {
  auto decoded = proto::decode<proto::ProposalRequest>(job.payload.data);
  if (!decoded.is_ok()) {
    return messaging::JobOutcome::from_status(
        messaging::job_fault(decoded.status()).with_context("propose job " + job.job_id));
  }
  proto::ProposalRequest& req = *decoded;
  if (req.program_id.empty()) {
    return messaging::JobOutcome::from_status(failed_precondition("propose job " + job.job_id + ": no program id"));
  }
  if (req.proposer.empty()) req.proposer = std::string(kDefaultProposer);

  ProposalInfo info;
  auto found = proposers_.find(req.proposer);
  if (found == proposers_.end()) {
    info.model = std::string(kUnknownModel);
    return propose_failed(req, info, not_found("proposer '" + req.proposer + "' is not available"));
  }
  Proposer& proposer = *found->second;
  info.model = proposer.model();

  // The package is resolved and parsed here, once, and handed to the proposer as it is.
  auto resolved = tasks_->resolve(req.task_blob, req.files);
  if (!resolved.is_ok()) return propose_failed(req, info, resolved.status());
  const service::TaskPackage& package = **resolved;
  const task::TaskSpec* spec = &package.spec;

  auto cand = proposer.propose_with_info(req, package, info);
  if (info.model.empty()) info.model = proposer.model();
  if (!cand.is_ok()) return propose_failed(req, info, cand.status());
  if (!info.requests_counted) requests_->Add({{"model", info.model}, {"outcome", "ok"}}).Increment();

  proto::CompileRequest compile;
  compile.cand = std::move(cand).value();
  if (!info.raw_reply.empty()) compile.cand.raw_llm_code = info.raw_reply;
  account(info, compile.cand.metadata);
  // The ids are the scorer's, whatever a proposer returns.
  compile.cand.program_id = req.program_id;
  compile.cand.campaign_id = campaign_of(req);
  compile.cand.proposal_index = req.proposal_index;
  compile.backend = spec->backend;
  compile.arch = spec->backend == proto::Backend::kCuda ? options_.cuda_arch : std::string("native");
  compile.screen_below = req.screen_below;
  compile.want_profile = req.want_profile;
  // A package that came by name goes on by name.
  compile.task_blob = package.blob;
  if (compile.task_blob.empty()) compile.files = std::move(req.files);
  return messaging::JobOutcome::ok(
      {follow_up(proto::svc::kCompile, proto::job_id::compile(req.program_id), proto::encode(compile))});
}

Result<service::ServiceHandlers> make_propose_handlers(const service::ServiceContext& ctx) {
  if (!ctx.config) return invalid_argument("propose: no configuration");
  const config::KilnConfig& cfg = *ctx.config;
  ProposeOptions options;
  options.cuda_arch = cfg.compiler.cuda_arch;
  auto handler = std::make_shared<ProposeHandler>(options, ctx.metrics);
  if (ctx.tasks) handler->set_task_source(ctx.tasks);
  handler->add(std::string(kDefaultProposer), std::make_unique<TunerProposer>());
  // The LLM proposer is always there: without a reachable server its proposals are given back, and after
  // max_attempts end as not evaluated with the reason, which is what a campaign asking for it should see.
  KILN_ASSIGN_OR_RETURN(auto llm, LlmProposer::make(llm_options_from(cfg.llm), ctx.metrics));
  handler->add("llm", std::move(llm));

  service::ServiceHandlers h;
  h.job = [handler](const proto::Job& job) { return handler->handle(job); };
  h.slots = static_cast<int>(cfg.llm_bridge.slots > 0 ? cfg.llm_bridge.slots : 1);
  h.service = std::string(proto::svc::kPropose);
  return h;
}

}  // namespace kiln::llm_bridge
