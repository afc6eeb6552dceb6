#include "kiln/promoter/handler.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "kiln/proto/payloads.h"

namespace kiln::promoter {

Result<std::unique_ptr<PromoteHandler>> PromoteHandler::create(const PromoterOptions& options,
                                                               std::shared_ptr<prometheus::Registry> metrics) {
  if (!(options.min_speedup > 0)) return invalid_argument("promoter: min_speedup must be > 0");
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
    return messaging::JobOutcome::failed("promote: cannot decode PromoteRequest: " + req.status().message());
  }
  proto::PromoteOutcome out;
  out.campaign_id = req->campaign_id;
  out.program_id = req->program_id;

  auto id = registry_.promote(*req, min_speedup_);
  if (id.is_ok()) {
    promoted_->Increment();
    out.promoted = true;
    out.kernel_id = *id;
    spdlog::info("promoted {} as {}", req->program_id, *id);
  } else if (registry::is_refusal(id.status())) {
    refused_->Increment();
    out.reason = id.status().message();
    spdlog::info("refused {}: {}", req->program_id, out.reason);
  } else if (is_retryable(id.status().code())) {
    errors_->Increment();
    return messaging::JobOutcome::retry("promote: " + id.status().message());
  } else {
    // The registry itself is broken (unreadable JSON): tell the scorer, and keep the job's error.
    errors_->Increment();
    out.reason = "registry error: " + id.status().message();
    spdlog::error("cannot promote {}: {}", req->program_id, id.status().message());
  }

  std::string payload = proto::encode(out);
  std::vector<proto::FollowUp> next{
      proto::FollowUp{std::string(proto::svc::kScore), req->program_id + ":promoted", proto::Bytes{payload}, 0}};
  if (!id.is_ok() && !registry::is_refusal(id.status()))
    return messaging::JobOutcome::failed("promote: " + id.status().message(), std::move(next));
  return messaging::JobOutcome::ok(std::move(next), std::move(payload));
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
