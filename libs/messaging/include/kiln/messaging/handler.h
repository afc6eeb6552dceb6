// What a worker's logic looks like to the messaging layer: a job in, an outcome with follow-ups out.
// Service handler libraries implement these and never touch a socket, so tests call them directly.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/messaging/outcome.h"
#include "kiln/proto/wire.h"

namespace kiln::messaging {

// The word of the RESULT for an outcome (proto::outcome): kDone "ok", kRetry "retry", kDeadLetter and
// kCandidateFault "failed" (done, failed for good; follow-ups still enqueued).
std::string_view wire_outcome(Outcome outcome);

// The outcome a RESULT's word stands for, for code that reads back a RESULT it holds encoded (the scorer
// replays the answers it stored): "ok" reads as kDone, "failed" as kCandidateFault (the word does not say
// whose fault it was), "retry" and any other word as kRetry (the broker refuses an unknown word and requeues
// the job). Handlers answer in Outcome and never need it.
Outcome outcome_from_wire(std::string_view wire);

struct JobOutcome {
  Outcome outcome = Outcome::kDone;
  std::string payload;  // result payload (encoded message), kept by the broker while the job is
  std::string error;    // one line for anything but kDone
  std::vector<proto::FollowUp> next;

  static JobOutcome ok(std::vector<proto::FollowUp> next = {}, std::string payload = {}) {
    return of(Outcome::kDone, {}, std::move(next), std::move(payload));
  }
  static JobOutcome retry(std::string error) { return of(Outcome::kRetry, std::move(error)); }
  static JobOutcome dead_letter(std::string error) { return of(Outcome::kDeadLetter, std::move(error)); }
  // `next`: the verdict for the scorer (or whoever judges); `error`: one line saying what the candidate did.
  static JobOutcome candidate_fault(std::string error, std::vector<proto::FollowUp> next = {},
                                    std::string payload = {}) {
    return of(Outcome::kCandidateFault, std::move(error), std::move(next), std::move(payload));
  }

  // The answer to a job whose work ended with a failed `status`, as outcome_for() reads it: given back,
  // dead-lettered, or, for the candidate's own fault only, answered with the follow-ups `verdict` returns
  // (those that score it). `status` is expected to be an error: an ok one is dead-lettered as a bug.
  using Verdict = std::function<std::vector<proto::FollowUp>(const Status& status)>;
  static JobOutcome from_status(const Status& status, const Verdict& verdict = {});

 private:
  static JobOutcome of(Outcome outcome, std::string error, std::vector<proto::FollowUp> next = {},
                       std::string payload = {}) {
    JobOutcome o;
    o.outcome = outcome;
    o.error = std::move(error);
    o.next = std::move(next);
    o.payload = std::move(payload);
    return o;
  }
};

// The codec: the RESULT a worker sends for `job` answered with `out`. A dead-lettered job (not itself a
// "score" job) takes along the DeadLetter the broker would send had it given up on the job
// ("dead:<job id>", worker_retry set: the payload was never judged), so the scorer ends its candidate as
// not evaluated at once.
proto::ResultMsg to_result(const proto::Job& job, JobOutcome out);

// The reverse, for a RESULT stored encoded and answered again: its outcome read by outcome_from_wire, its
// payload, error and follow-ups (a dead letter's among them) as they were sent.
JobOutcome from_result(proto::ResultMsg result);

// Called on a worker thread, at most `slots` at once. Must not throw (a throw becomes kRetry).
using JobHandler = std::function<JobOutcome(const proto::Job& job)>;

// Answers a non-durable query (method + body) with a reply body. Called on the I/O thread: keep it quick.
using RequestHandler = std::function<Result<std::string>(const proto::Request& request)>;

}  // namespace kiln::messaging
