#include "dead_letters.h"

#include <string>
#include <utility>

#include "kiln/proto/codec.h"
#include "kiln/proto/ids.h"

namespace kiln::scorer {

namespace {

// The result a dead job stands for: its candidate, stopped at the job's stage with `why`. Every service
// but "promote", whose dead letter ends a promotion, not a candidate.
Result<proto::ScoreResult> result_of(const proto::DeadLetter& dead, const std::string& why) {
  const std::string_view body = dead.payload.data;
  proto::ScoreResult r;
  if (dead.service == proto::svc::kPropose || dead.service == proto::svc::kProposeExternal) {
    auto req = proto::decode<proto::ProposalRequest>(body);
    if (!req.is_ok()) return invalid_argument("dead propose job: " + req.status().message());
    r.cand.campaign_id = req->parent.campaign_id;
    r.cand.program_id = req->program_id;
    r.cand.parent_id = req->parent.program_id;
    r.cand.generation = req->parent.generation + 1;
    r.cand.proposal_index = req->proposal_index;
    r.cand.proposer = req->proposer;
    r.stage = proto::Stage::kPropose;
    r.error = why;
  } else if (dead.service == proto::svc::kCompile) {
    auto req = proto::decode<proto::CompileRequest>(body);
    if (!req.is_ok()) return invalid_argument("dead compile job: " + req.status().message());
    r.cand = req->cand;
    r.purpose = req->purpose;
    r.stage = proto::Stage::kCompile;
    r.error = why;
  } else if (dead.service.rfind("test.", 0) == 0) {
    auto req = proto::decode<proto::TestRequest>(body);
    if (!req.is_ok()) return invalid_argument("dead test job: " + req.status().message());
    r.cand = req->cand;
    r.purpose = req->purpose;
    r.stage = proto::Stage::kTest;
    r.build = req->build;
    r.test.status = proto::TestStatus::kCrashed;
    r.test.message = why;
  } else if (dead.service == proto::svc::kScore) {
    // A result that could not be scored: its candidate still ends, as "no result".
    auto kind = proto::peek_string(body, "kind");
    if (!kind.is_ok() || *kind != proto::kind::kResult)
      return invalid_argument("dead score job " + dead.job_id + " carried no result");
    auto req = proto::decode<proto::ScoreResult>(body);
    if (!req.is_ok()) return invalid_argument("dead score job: " + req.status().message());
    r.cand = req->cand;
    r.purpose = req->purpose;
    r.stage = proto::Stage::kTest;
    r.test.status = proto::TestStatus::kCrashed;
    r.test.message = "scoring " + why;
  } else {
    return invalid_argument("dead letter from unknown service '" + dead.service + "'");
  }
  return r;
}

}  // namespace

Status DeadLetters::on_dead(std::string_view job_id, std::string_view payload, Effects& fx) {
  auto msg = proto::decode<proto::DeadLetter>(payload);
  if (!msg.is_ok()) return invalid_argument("dead letter: " + msg.status().message());
  const proto::DeadLetter& dead = *msg;
  const std::string cause = (dead.reason.empty() ? std::string("no reason given") : dead.reason) + " (dead after " +
                            std::to_string(dead.attempts) + " attempts)";
  const std::string why = (dead.worker_retry ? "not evaluated: " : "crashed: ") + cause;

  if (dead.service == proto::svc::kPromote) {
    auto req = proto::decode<proto::PromoteRequest>(dead.payload.data);
    if (!req.is_ok()) return invalid_argument("dead promote job: " + req.status().message());
    return promotions_.on_promote_dead(*req, "promotion failed: " + (dead.worker_retry ? cause : why), fx);
  }
  KILN_ASSIGN_OR_RETURN(proto::ScoreResult r, result_of(dead, why));
  if (dead.worker_retry) return results_.on_not_evaluated(r, why, fx);
  return results_.on_result(job_id, std::move(r), fx);
}

}  // namespace kiln::scorer
