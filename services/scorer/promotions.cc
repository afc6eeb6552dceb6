#include "promotions.h"

#include "kiln/archive/scoring.h"

namespace kiln::scorer {

namespace {

proto::PromoteRequest promote_request(const CampaignRow& c, TaskSpecs& specs, const proto::Program& p,
                                      const proto::ScoreResult& eval, const proto::ScoreResult& confirm) {
  proto::PromoteRequest req;
  req.campaign_id = c.id;
  req.program_id = p.id;
  req.task_name = c.task_name;
  req.op = c.op;
  req.backend = c.backend;
  req.dtype = c.dtype;
  if (auto spec = specs.of(c); spec.is_ok()) {
    req.op = (*spec)->op;
    req.dtype = (*spec)->dtype;
    if (!(*spec)->benchmark_cases.empty()) req.shape = (*spec)->benchmark_cases.front();
  }
  req.source = p.code;
  req.source_ext = std::string(proto::source_extension(c.backend));
  req.params = p.template_parameters;
  req.verification = eval.test.correctness;
  // Both measurements cleared speedup_shortfall on every case, so both have a first case. The Forge
  // fields name the first case (its dims make the kernel id); every case travels beside them, and the
  // registry checks each again.
  req.benchmark = eval.test.performance.cases.front();
  req.confirmation = confirm.test.performance.cases.front();
  req.benchmark_cases = eval.test.performance.cases;
  req.confirmation_cases = confirm.test.performance.cases;
  if (req.shape.empty()) req.shape = req.benchmark.dims;
  req.timing_method = eval.test.performance.method;
  req.timing_mode = eval.test.performance.mode;
  req.worker = eval.test.worker;
  req.confirm_worker = confirm.test.worker;
  req.build = eval.build;
  return req;
}

}  // namespace

Status Promotions::request_confirmation(CampaignRow& c, const proto::Program& p, int64_t proposal_index, Effects& fx) {
  KILN_ASSIGN_OR_RETURN(bool fresh, store_.insert_promotion(p.id, c.id));
  if (!fresh) return Status::ok();

  proto::CompileRequest compile;
  compile.cand = candidate_of(c, p, proposal_index);
  compile.purpose = proto::Purpose::kConfirm;
  compile.backend = c.backend;
  compile.arch = arch_for(options_, c.backend);
  compile.want_profile = reads_profiles(c);
  service::attach_task(*options_.tasks, c.files, &compile.files, &compile.task_blob);
  // Measured again by another tester (another GPU) than the first time when one is connected, and on the
  // same device model: the registry takes a confirmation made on the target only.
  KILN_ASSIGN_OR_RETURN(auto eval, store_.load_result(p.id, proto::Purpose::kEval));
  if (eval) {
    compile.avoid_tester = eval->test.worker.worker_id;
    compile.tester_device = eval->test.worker.device_name;
  }
  fx.next.push_back(follow_up(proto::svc::kCompile, proto::job_id::compile_confirm(p.id), proto::encode(compile)));
  return Status::ok();
}

Status Promotions::on_confirmation(std::string_view job_id, CampaignRow& c, const std::string& pid,
                                   const proto::ScoreResult& r, Effects& fx) {
  KILN_ASSIGN_OR_RETURN(auto state, store_.promotion_state(pid));
  if (!state || *state != promo::kConfirming) return count_duplicate(store_, c, fx);
  KILN_ASSIGN_OR_RETURN(bool fresh, store_.insert_result(pid, proto::Purpose::kConfirm, c.id, job_id, r));
  if (!fresh) return count_duplicate(store_, c, fx);

  std::string shortfall = archive::speedup_shortfall(r, options_.min_speedup);
  if (!shortfall.empty()) {
    KILN_RETURN_IF_ERROR(store_.set_promotion(pid, promo::kNotConfirmed, "", "not confirmed: " + shortfall));
    return lifecycle_.maybe_finish(c);
  }
  KILN_ASSIGN_OR_RETURN(auto eval, store_.load_result(pid, proto::Purpose::kEval));
  KILN_ASSIGN_OR_RETURN(auto row, store_.load_program(pid));
  if (!eval || !row) return internal_error("confirmation of " + pid + ": its eval result is missing");

  proto::PromoteRequest req = promote_request(c, specs_, row->record, *eval, r);
  KILN_RETURN_IF_ERROR(store_.set_promotion(pid, promo::kPromoting, "", ""));
  fx.next.push_back(follow_up(proto::svc::kPromote, proto::job_id::promote(pid), proto::encode(req)));
  return Status::ok();
}

Status Promotions::on_confirmation_not_made(CampaignRow& c, const std::string& pid, const std::string& why,
                                            Effects& fx) {
  KILN_ASSIGN_OR_RETURN(auto state, store_.promotion_state(pid));
  if (!state || *state != promo::kConfirming) return count_duplicate(store_, c, fx);
  KILN_RETURN_IF_ERROR(store_.set_promotion(pid, promo::kNotConfirmed, "", "not confirmed: " + why));
  return lifecycle_.maybe_finish(c);
}

Status Promotions::on_promoted(std::string_view payload, Effects& fx) {
  auto msg = proto::decode<proto::PromoteOutcome>(payload);
  if (!msg.is_ok()) return invalid_argument("promoted: " + msg.status().message());
  const std::string cid = msg->campaign_id.empty() ? campaign_of(msg->program_id) : msg->campaign_id;
  fx.campaign_id = cid;
  KILN_ASSIGN_OR_RETURN(auto camp, store_.load_campaign(cid));
  if (!camp) return not_found("promotion outcome for unknown campaign '" + cid + "'");
  KILN_ASSIGN_OR_RETURN(auto state, store_.promotion_state(msg->program_id));
  if (!state || *state != promo::kPromoting) return count_duplicate(store_, *camp, fx);
  if (msg->promoted)
    KILN_RETURN_IF_ERROR(
        store_.set_promotion(msg->program_id, promo::kPromoted, msg->kernel_id, "promoted as " + msg->kernel_id));
  else
    KILN_RETURN_IF_ERROR(store_.set_promotion(msg->program_id, promo::kRefused, "", "refused: " + msg->reason));
  return lifecycle_.maybe_finish(*camp);
}

Status Promotions::on_promote_dead(const proto::PromoteRequest& req, const std::string& note, Effects& fx) {
  fx.campaign_id = req.campaign_id;
  KILN_ASSIGN_OR_RETURN(auto camp, store_.load_campaign(req.campaign_id));
  if (!camp) return not_found("dead promote job for unknown campaign '" + req.campaign_id + "'");
  KILN_ASSIGN_OR_RETURN(auto state, store_.promotion_state(req.program_id));
  if (!state || *state != promo::kPromoting) return count_duplicate(store_, *camp, fx);
  KILN_RETURN_IF_ERROR(store_.set_promotion(req.program_id, promo::kFailed, "", note));
  return lifecycle_.maybe_finish(*camp);
}

}  // namespace kiln::scorer
