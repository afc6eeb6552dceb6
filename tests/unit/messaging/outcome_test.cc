#include "kiln/messaging/outcome.h"

#include <catch2/catch.hpp>

#include "kiln/messaging/handler.h"
#include "kiln/proto/payloads.h"

using kiln::Status;
using kiln::StatusCode;
using kiln::messaging::JobOutcome;
using kiln::messaging::Outcome;
using kiln::messaging::outcome_for;

TEST_CASE("every status code has one outcome", "[messaging][outcome]") {
  CHECK(outcome_for(Status::ok()) == Outcome::kDone);
  CHECK(outcome_for(kiln::unavailable("no scratch space")) == Outcome::kRetry);
  CHECK(outcome_for(kiln::deadline_exceeded("slow")) == Outcome::kRetry);
  CHECK(outcome_for(kiln::invalid_argument("does not build")) == Outcome::kCandidateFault);
  CHECK(outcome_for(kiln::resource_exhausted("over the limit")) == Outcome::kCandidateFault);
  CHECK(outcome_for(kiln::failed_precondition("the reference does not build")) == Outcome::kDeadLetter);
  CHECK(outcome_for(kiln::not_found("no such proposer")) == Outcome::kDeadLetter);
  CHECK(outcome_for(Status(StatusCode::kAlreadyExists, "twice")) == Outcome::kDeadLetter);
  CHECK(outcome_for(kiln::permission_denied("key refused")) == Outcome::kDeadLetter);
  CHECK(outcome_for(kiln::internal_error("corrupt")) == Outcome::kDeadLetter);
  // Retrying is what is_retryable says, nothing more.
  for (auto code : {StatusCode::kInvalidArgument, StatusCode::kNotFound, StatusCode::kAlreadyExists,
                    StatusCode::kUnavailable, StatusCode::kDeadlineExceeded, StatusCode::kResourceExhausted,
                    StatusCode::kFailedPrecondition, StatusCode::kPermissionDenied, StatusCode::kInternal}) {
    CHECK((outcome_for(Status(code, "x")) == Outcome::kRetry) == kiln::is_retryable(code));
  }
}

TEST_CASE("a handler says whose fault a failure is, keeping its message", "[messaging][outcome]") {
  const Status parse = kiln::invalid_argument("task.yaml: name: expected [a-z0-9_]+");
  CHECK(outcome_for(parse) == Outcome::kCandidateFault);
  CHECK(outcome_for(kiln::messaging::job_fault(parse)) == Outcome::kDeadLetter);
  CHECK(outcome_for(kiln::messaging::worker_fault(kiln::not_found("no nvcc"))) == Outcome::kRetry);
  CHECK(outcome_for(kiln::messaging::candidate_fault(kiln::internal_error("x"))) == Outcome::kCandidateFault);
  CHECK(kiln::messaging::job_fault(parse).message() == parse.message());
  CHECK(kiln::messaging::worker_fault(Status::ok()).is_ok());
}

TEST_CASE("only the candidate's own failure is answered with its verdict", "[messaging][outcome]") {
  int verdicts = 0;
  JobOutcome::Verdict verdict = [&](const Status& st) {
    ++verdicts;
    return std::vector<kiln::proto::FollowUp>{{"score", "c1/p1:score", {st.message()}, 0, {}}};
  };
  JobOutcome retry = JobOutcome::from_status(kiln::unavailable("toolchain crashed"), verdict);
  CHECK(retry.outcome == Outcome::kRetry);
  CHECK(retry.next.empty());
  CHECK(retry.error == "toolchain crashed");
  JobOutcome dead = JobOutcome::from_status(kiln::failed_precondition("task package: no task.yaml"), verdict);
  CHECK(dead.outcome == Outcome::kDeadLetter);
  CHECK(dead.next.empty());
  CHECK(verdicts == 0);
  JobOutcome scored = JobOutcome::from_status(kiln::invalid_argument("does not build"), verdict);
  CHECK(scored.outcome == Outcome::kCandidateFault);
  REQUIRE(scored.next.size() == 1);
  CHECK(scored.next[0].payload.data == "does not build");
  CHECK(verdicts == 1);
  // A failure without a cause is a bug: never scored, never lost.
  CHECK(JobOutcome::from_status(Status::ok(), verdict).outcome == Outcome::kDeadLetter);
}

TEST_CASE("the codec writes each outcome's word, and a dead letter for the scorer", "[messaging][outcome]") {
  kiln::proto::Job job;
  job.job_id = "c1/p1:compile";
  job.attempt = 2;
  job.service = "compile";
  job.payload.data = "the request";

  auto done = kiln::messaging::to_result(job, JobOutcome::ok({{"test.cpu", "c1/p1:test", {"t"}, 0, {}}}, "p"));
  CHECK(done.job_id == "c1/p1:compile");
  CHECK(done.attempt == 2);
  CHECK(done.outcome == "ok");
  CHECK(done.payload.data == "p");
  CHECK(done.next.size() == 1);
  CHECK(kiln::messaging::to_result(job, JobOutcome::retry("busy")).outcome == "retry");
  auto fault = kiln::messaging::to_result(
      job, JobOutcome::candidate_fault("does not build", {{"score", "c1/p1:score", {"s"}, 0, {}}}));
  CHECK(fault.outcome == "failed");
  REQUIRE(fault.next.size() == 1);
  CHECK(fault.next[0].job_id == "c1/p1:score");  // the verdict, and nothing else

  auto dead = kiln::messaging::to_result(job, JobOutcome::dead_letter("the reference does not build"));
  CHECK(dead.outcome == "failed");
  CHECK(dead.error == "the reference does not build");
  REQUIRE(dead.next.size() == 1);
  CHECK(dead.next[0].service == "score");
  CHECK(dead.next[0].job_id == "dead:c1/p1:compile");  // the id the broker's own dead letter would have
  auto letter = kiln::proto::decode<kiln::proto::DeadLetter>(dead.next[0].payload.data);
  REQUIRE(letter.is_ok());
  CHECK(letter->kind == "dead");
  CHECK(letter->job_id == "c1/p1:compile");
  CHECK(letter->service == "compile");
  CHECK(letter->attempts == 2);
  CHECK(letter->reason == "the reference does not build");
  CHECK(letter->payload.data == "the request");
  CHECK(letter->worker_retry);  // never judged: the scorer records "not evaluated"

  job.service = "score";  // the scorer is not told about its own jobs, as with the broker's dead letters
  CHECK(kiln::messaging::to_result(job, JobOutcome::dead_letter("x")).next.empty());
}

TEST_CASE("a stored RESULT reads back as the answer that was sent", "[messaging][outcome]") {
  using kiln::messaging::outcome_from_wire;
  CHECK(outcome_from_wire("ok") == Outcome::kDone);
  CHECK(outcome_from_wire("retry") == Outcome::kRetry);
  CHECK(outcome_from_wire("failed") == Outcome::kCandidateFault);  // the word does not say whose fault
  CHECK(outcome_from_wire("maybe") == Outcome::kRetry);            // what the broker does with it
  CHECK(outcome_from_wire("") == Outcome::kRetry);

  kiln::proto::Job job;
  job.job_id = "c1:start";
  job.service = "score";
  for (const JobOutcome& sent :
       {JobOutcome::ok({{"compile", "c1/p0:compile", {"c"}, 0, {}}}, "info"), JobOutcome::retry("database busy"),
        JobOutcome::candidate_fault("does not build", {{"score", "c1/p0:score", {"s"}, 0, {}}})}) {
    INFO(kiln::messaging::outcome_name(sent.outcome));
    const auto stored = kiln::proto::encode(kiln::messaging::to_result(job, sent));
    auto decoded = kiln::proto::decode<kiln::proto::ResultMsg>(stored);
    REQUIRE(decoded.is_ok());
    JobOutcome replayed = kiln::messaging::from_result(std::move(decoded).value());
    CHECK(replayed.outcome == sent.outcome);
    CHECK(replayed.payload == sent.payload);
    CHECK(replayed.error == sent.error);
    REQUIRE(replayed.next.size() == sent.next.size());
    for (size_t i = 0; i < sent.next.size(); ++i) CHECK(replayed.next[i].job_id == sent.next[i].job_id);
    // Sent again, it is the same RESULT byte for byte.
    CHECK(kiln::proto::encode(kiln::messaging::to_result(job, replayed)) == stored);
  }
  CHECK(kiln::messaging::outcome_name(Outcome::kDeadLetter) == "dead_letter");
}
