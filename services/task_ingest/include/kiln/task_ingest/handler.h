// The "ingest" service: an IngestRequest (a task package and campaign settings) in; a valid package
// becomes a CampaignStart for the scorer, an invalid one a failed job with the one-line validation error
// (the submission's own failure: messaging::Outcome::kCandidateFault).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include <memory>

#include "kiln/core/status.h"
#include "kiln/messaging/handler.h"
#include "kiln/proto/payloads.h"
#include "kiln/proto/wire.h"
#include "kiln/service/service.h"

namespace kiln::task_ingest {

struct IngestOptions {
  int64_t default_budget = 16;        // used when a request's budget is negative
  int64_t default_max_in_flight = 4;  // used when a request's max_in_flight is not positive
};

class IngestHandler {
 public:
  // `metrics` may be null (a private registry is used then).
  IngestHandler(IngestOptions options, std::shared_ptr<prometheus::Registry> metrics);

  // Thread-safe. ok: next = [score "campaign:<id>:start" CampaignStart], payload = the same CampaignStart.
  messaging::JobOutcome handle(const proto::Job& job);

  // The validation step alone: the CampaignStart a request becomes, or the one-line reason it cannot.
  Result<proto::CampaignStart> campaign_for(const proto::IngestRequest& request) const;

  // The answer to a request that became `start`, or to the reason it could not, by messaging::outcome_for:
  // a submission that does not validate (kInvalidArgument, kResourceExhausted) is its own failure, a failed
  // job with the reason and no follow-up; any other fault is not the submission's, given back or
  // dead-lettered.
  messaging::JobOutcome answer(Result<proto::CampaignStart> start);

 private:
  IngestOptions options_;
  std::shared_ptr<prometheus::Registry> metrics_;
  prometheus::Counter* accepted_ = nullptr;  // kiln_tasks_ingested_total{outcome=...}
  prometheus::Counter* rejected_ = nullptr;
};

// Handler factory for services/task_ingest/main.cc: defaults from scorer.default_budget and
// scorer.max_in_flight; two slots (validation is quick and stateless).
Result<service::ServiceHandlers> make_ingest_handlers(const service::ServiceContext& ctx);

}  // namespace kiln::task_ingest
