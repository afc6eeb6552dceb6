#include "kiln/messaging/handler.h"

#include <utility>

#include "kiln/proto/ids.h"
#include "kiln/proto/payloads.h"

namespace kiln::messaging {

std::string_view wire_outcome(Outcome outcome) {
  switch (outcome) {
    case Outcome::kDone: return proto::outcome::kOk;
    case Outcome::kRetry: return proto::outcome::kRetry;
    case Outcome::kDeadLetter:
    case Outcome::kCandidateFault: return proto::outcome::kFailed;
  }
  return proto::outcome::kRetry;
}

Outcome outcome_from_wire(std::string_view wire) {
  if (wire == proto::outcome::kOk) return Outcome::kDone;
  if (wire == proto::outcome::kFailed) return Outcome::kCandidateFault;
  return Outcome::kRetry;
}

JobOutcome JobOutcome::from_status(const Status& status, const Verdict& verdict) {
  switch (outcome_for(status)) {
    case Outcome::kRetry: return retry(status.message());
    case Outcome::kCandidateFault:
      if (verdict) return candidate_fault(status.message(), verdict(status));
      return candidate_fault(status.message());
    case Outcome::kDeadLetter: return dead_letter(status.message());
    case Outcome::kDone: break;
  }
  return dead_letter("a handler reported a failure without a cause (a bug)");
}

proto::ResultMsg to_result(const proto::Job& job, JobOutcome out) {
  proto::ResultMsg r;
  r.job_id = job.job_id;
  r.attempt = job.attempt;
  r.outcome = std::string(wire_outcome(out.outcome));
  r.payload = proto::Bytes{std::move(out.payload)};
  r.error = std::move(out.error);
  r.next = std::move(out.next);
  if (out.outcome == Outcome::kDeadLetter && job.service != proto::svc::kScore) {
    proto::DeadLetter dl;
    dl.job_id = job.job_id;
    dl.service = job.service;
    dl.attempts = job.attempt;
    dl.reason = r.error;
    dl.payload = job.payload;
    dl.worker_retry = true;
    r.next.push_back(proto::FollowUp{std::string(proto::svc::kScore),
                                     proto::job_id::dead_letter(job.job_id),
                                     proto::Bytes{proto::encode(dl)},
                                     0,
                                     {}});
  }
  return r;
}

JobOutcome from_result(proto::ResultMsg result) {
  JobOutcome out;
  out.outcome = outcome_from_wire(result.outcome);
  out.payload = std::move(result.payload.data);
  out.error = std::move(result.error);
  out.next = std::move(result.next);
  return out;
}

}  // namespace kiln::messaging
