#include "kiln/core/status.h"

namespace kiln {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kAlreadyExists: return "already_exists";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kDeadlineExceeded: return "deadline_exceeded";
    case StatusCode::kResourceExhausted: return "resource_exhausted";
    case StatusCode::kFailedPrecondition: return "failed_precondition";
    case StatusCode::kPermissionDenied: return "permission_denied";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

bool is_retryable(StatusCode code) { return code == StatusCode::kUnavailable || code == StatusCode::kDeadlineExceeded; }

Status Status::with_context(std::string_view context) const {
  if (is_ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return {code_, std::move(m)};
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

}  // namespace kiln
