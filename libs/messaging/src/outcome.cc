#include "kiln/messaging/outcome.h"

namespace kiln::messaging {

std::string_view outcome_name(Outcome outcome) {
  switch (outcome) {
    case Outcome::kDone: return "done";
    case Outcome::kRetry: return "retry";
    case Outcome::kDeadLetter: return "dead_letter";
    case Outcome::kCandidateFault: return "candidate_fault";
  }
  return "unknown";
}

Outcome outcome_for(const Status& status) {
  if (status.is_ok()) return Outcome::kDone;
  if (is_retryable(status.code())) return Outcome::kRetry;
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kResourceExhausted: return Outcome::kCandidateFault;
    default: return Outcome::kDeadLetter;
  }
}

namespace {
Status recoded(const Status& status, StatusCode code) {
  return status.is_ok() ? status : Status(code, status.message());
}
}  // namespace

Status candidate_fault(const Status& status) { return recoded(status, StatusCode::kInvalidArgument); }
Status job_fault(const Status& status) { return recoded(status, StatusCode::kFailedPrecondition); }
Status worker_fault(const Status& status) { return recoded(status, StatusCode::kUnavailable); }

}  // namespace kiln::messaging
