#include "kiln/promoter/handler.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "kiln/messaging/outcome.h"
#include "kiln/proto/ids.h"
#include "kiln/proto/payloads.h"

namespace kiln::promoter {

Result<std::unique_ptr<PromoteHandler>> PromoteHandler::create(const PromoterOptions& options,
                                                               std::shared_ptr<prometheus::Registry> metrics) {
  if (!(options.min_speedup >= registry::kMinPromotionSpeedup))
    return invalid_argument("promoter: min_speedup must be at least 1.10 (Forge's bar), got " +
                            std::to_string(options.min_speedup));
  std::error_code ec;
  std::string dir = std::filesystem::absolute(options.registry_dir, ec).string();
  if (ec) return invalid_argument("promoter: " + options.registry_dir + ": " + ec.message());
  KILN_ASSIGN_OR_RETURN(registry::Registry reg, registry::Registry::open(dir));
  if (!metrics) metrics = std::make_shared<prometheus::Registry>();
  return std::unique_ptr<PromoteHandler>(new PromoteHandler(std::move(reg), options.min_speedup, std::move(metrics)));
}

PromoteHandler::PromoteHandler(registry::Registry registry, double min_speedup,
                               std::shared_ptr<prometheus::Registry> metrics)
    : registry_(std::move(registry)), min_speedup_(min_speedup), metrics_(std::move(metrics)) {
  auto& family = prometheus::BuildCounter()
                     .Name("kiln_promotions_total")
                     .Help("Promotion requests by outcome: promoted, refused by a rule, or error.")
                     .Register(*metrics_);
  promoted_ = &family.Add({{"outcome", "promoted"}});
  refused_ = &family.Add({{"outcome", "refused"}});
  errors_ = &family.Add({{"outcome", "error"}});
}

messaging::JobOutcome PromoteHandler::handle(const proto::Job& job) {
  auto req = proto::decode<proto::PromoteRequest>(job.payload.data);
  if (!req.is_ok()) {
    errors_->Increment();
    return messaging::JobOutcome::from_status(
        messaging::job_fault(req.status()).with_context("promote: cannot decode PromoteRequest"));
  }
  proto::PromoteOutcome out;
  out.campaign_id = req->campaign_id;
  out.program_id = req->program_id;
  auto tell_scorer = [&] {
    return std::vector<proto::FollowUp>{proto::FollowUp{std::string(proto::svc::kScore),
                                                        proto::job_id::promoted(req->program_id),
                                                        proto::Bytes{proto::encode(out)}, 0}};
  };

  auto id = registry_.promote(*req, min_speedup_);
  if (id.is_ok()) {
    promoted_->Increment();
    out.promoted = true;
    out.kernel_id = *id;
    spdlog::info("promoted {} as {}", req->program_id, *id);
    return messaging::JobOutcome::ok(tell_scorer(), proto::encode(out));
  }
  // A refusal by the promotion rules (too slow, a duplicate, a malformed request) is the kernel's own
  // failure. Anything else is the registry's, never the kernel's: I/O trouble is given back; a registry that
  // cannot be read (or has outgrown its bound) is dead-lettered, and the scorer records the promotion as
  // failed, with the cause.
  Status fault = id.status();
  if (registry::is_refusal(fault))
    fault = messaging::candidate_fault(fault);
  else if (!is_retryable(fault.code()))
    fault = messaging::job_fault(fault);
  messaging::JobOutcome answer = messaging::JobOutcome::from_status(fault.with_context("promote"), [&](const Status&) {
    out.reason = id.status().message();
    return tell_scorer();
  });
  if (answer.outcome == messaging::Outcome::kCandidateFault) {
    refused_->Increment();
    answer.payload = proto::encode(out);
    spdlog::info("refused {}: {}", req->program_id, out.reason);
  } else {
    errors_->Increment();
    if (answer.outcome == messaging::Outcome::kDeadLetter)
      spdlog::error("cannot promote {}: {}", req->program_id, id.status().message());
  }
  return answer;
}

Result<service::ServiceHandlers> make_promote_handlers(const service::ServiceContext& ctx) {
  if (ctx.config == nullptr) return invalid_argument("promoter: no config");
  PromoterOptions options;
  options.registry_dir = ctx.config->promoter.registry_dir;
  options.min_speedup = ctx.config->promoter.min_speedup;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<PromoteHandler> handler, PromoteHandler::create(options, ctx.metrics));
  spdlog::info("registry {} (min speedup {:.2f})", handler->registry().dir(), options.min_speedup);
  std::shared_ptr<PromoteHandler> shared = std::move(handler);
  service::ServiceHandlers h;
  h.job = [shared](const proto::Job& job) { return shared->handle(job); };
  h.slots = 1;
  h.service = std::string(proto::svc::kPromote);
  return h;
}

}  // namespace kiln::promoter
