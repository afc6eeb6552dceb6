// What becomes of a job: the one vocabulary every handler answers in. A handler turns what went wrong into
// a Status whose code says whose fault it was, and outcome_for() reads the code the same way everywhere.
// Only the codec (to_result, in handler.h) writes the words of the wire.
#pragma once

#include <string>
#include <string_view>

#include "kiln/core/status.h"

namespace kiln::messaging {

enum class Outcome {
  // The work is done; its follow-ups carry the candidate on.
  kDone,
  // A transient fault, or one of this worker's own (its toolchain, its evaluator, its disk): the job is given
  // back for another attempt, maybe elsewhere; after max_attempts the broker dead-letters it.
  kRetry,
  // A permanent fault that is not the candidate's (its task package, a malformed request): no attempt can do
  // better, so the job ends now and the scorer is told, as for a job the broker dead-letters. The candidate is
  // recorded as not evaluated, never scored.
  kDeadLetter,
  // The candidate's own failure (no code, it does not build, it is wrong, it is refused): the job is done, and
  // its verdict, in the follow-ups, is scored against the candidate.
  kCandidateFault,
};

// "done" | "retry" | "dead_letter" | "candidate_fault": for logs and messages.
std::string_view outcome_name(Outcome outcome);

// The outcome a job gets when a handler's work ends with `status`:
//   ok                                                   -> kDone
//   kUnavailable, kDeadlineExceeded (is_retryable)       -> kRetry
//   kInvalidArgument, kResourceExhausted                 -> kCandidateFault (the input judged is wrong, or
//                                                           over a limit)
//   kNotFound, kAlreadyExists, kFailedPrecondition,
//   kPermissionDenied, kInternal                         -> kDeadLetter
// A library's code need not say whose fault a failure is in a handler's context (a task package that does
// not parse is kInvalidArgument, yet no fault of the candidate's): the handler, which knows, says so with one
// of the three functions below before asking.
Outcome outcome_for(const Status& status);

// The candidate's own failure: kInvalidArgument, same message (kCandidateFault).
Status candidate_fault(const Status& status);
// A permanent fault of the job that is not the candidate's: kFailedPrecondition, same message (kDeadLetter).
Status job_fault(const Status& status);
// A fault of this worker (no scratch space, a toolchain or an evaluator that cannot run here): kUnavailable,
// same message (kRetry).
Status worker_fault(const Status& status);

}  // namespace kiln::messaging
