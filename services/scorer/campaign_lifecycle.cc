#include "campaign_lifecycle.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "kiln/core/time.h"
#include "kiln/task/task.h"

namespace kiln::scorer {

Status CampaignLifecycle::start(std::string_view payload, Effects& fx) {
  auto msg = proto::decode<proto::CampaignStart>(payload);
  if (!msg.is_ok()) return invalid_argument("campaign.start: " + msg.status().message());
  const proto::CampaignStart& start = *msg;
  fx.campaign_id = start.campaign_id;
  if (!proto::is_campaign_id(start.campaign_id))
    return invalid_argument("campaign.start: bad campaign id '" + start.campaign_id + "'");
  if (start.budget < 0) return invalid_argument("campaign " + start.campaign_id + ": negative budget");

  KILN_ASSIGN_OR_RETURN(auto existing, store_.load_campaign(start.campaign_id));
  if (existing) {
    // The same campaign submitted again under another job id: it is already running or done.
    fx.duplicate = true;
    return Status::ok();
  }
  auto spec = task::parse_task(start.files);
  if (!spec.is_ok()) return spec.status().with_context("campaign " + start.campaign_id);

  CampaignRow c;
  c.id = start.campaign_id;
  c.task_id = start.task_id.empty() ? proto::task_id(start.files) : start.task_id;
  c.task_name = start.task_name.empty() ? spec->name : start.task_name;
  c.backend = spec->backend;
  c.op = spec->op;
  c.dtype = spec->dtype;
  c.files = start.files;
  c.budget = start.budget;
  c.proposer = start.proposer.empty() ? std::string(proposer::kTuner) : start.proposer;
  c.max_in_flight = start.max_in_flight > 0 ? start.max_in_flight : options_.default_max_in_flight;
  c.state = std::string(kRunning);
  c.submitted_at = start.submitted_at;
  c.started_at = wall_time_s();
  c.target_speedup = start.target_speedup == 0 ? options_.target_speedup : std::max(start.target_speedup, 0.0);
  c.patience = start.patience == 0 ? options_.patience : std::max<int64_t>(start.patience, 0);
  KILN_RETURN_IF_ERROR(store_.insert_campaign(c));

  // Program 0: the task's kernel as is, with the first value of every template parameter.
  proto::Program p0;
  p0.id = program_id_for(c.id, 0);
  p0.code = c.files.at(spec->kernel_file).data;
  p0.is_program0 = true;
  p0.language = std::string(proto::kernel_language(spec->backend));
  for (const auto& [name, values] : spec->params) p0.template_parameters[name] = values.front();
  p0.is_templated = !spec->params.empty();
  p0.task = task_ref(c);
  p0.metadata["proposer"] = std::string(proposer::kProgram0);
  p0.metadata["campaign_id"] = c.id;
  KILN_RETURN_IF_ERROR(store_.insert_program(c, p0, 0, proposer::kProgram0));

  proto::CompileRequest compile;
  compile.cand = candidate_of(c, p0, 0);
  compile.backend = c.backend;
  compile.arch = arch_for(options_, spec->backend);
  compile.want_profile = reads_profiles(c);
  service::attach_task(*options_.tasks, c.files, &compile.files, &compile.task_blob);
  fx.next.push_back(follow_up(proto::svc::kCompile, proto::job_id::compile(p0.id), proto::encode(compile)));
  specs_.keep(c.id, std::move(spec).value());  // every result and promotion of the campaign reads it

  // The tuner reads no feedback: its proposals start at once, beside program 0. Any other proposer writes
  // from what the hardware said about its parent, so its first proposals wait for program 0's result
  // (Results tops the campaign up once it is scored or found not evaluable).
  if (!reads_feedback(c))
    while (c.proposing() && c.proposed < c.max_in_flight) KILN_RETURN_IF_ERROR(proposals_.issue(c, fx));

  KILN_ASSIGN_OR_RETURN(proto::CampaignInfo info, queries_.campaign_info(c));
  fx.payload = proto::encode(info);
  return Status::ok();
}

Status CampaignLifecycle::cancel(std::string_view payload, Effects& fx) {
  auto msg = proto::decode<proto::CampaignCancel>(payload);
  if (!msg.is_ok()) return invalid_argument("campaign.cancel: " + msg.status().message());
  fx.campaign_id = msg->campaign_id;
  KILN_ASSIGN_OR_RETURN(auto c, store_.load_campaign(msg->campaign_id));
  if (!c) return not_found("campaign.cancel: unknown campaign '" + msg->campaign_id + "'");
  if (c->proposing()) {
    c->stop_reason = "cancelled";
    KILN_RETURN_IF_ERROR(store_.save_control(*c));
  }
  KILN_RETURN_IF_ERROR(maybe_finish(*c));
  KILN_ASSIGN_OR_RETURN(proto::CampaignInfo info, queries_.campaign_info(*c));
  fx.payload = proto::encode(info);
  return Status::ok();
}

Status CampaignLifecycle::check_early_stop(CampaignRow& c, const std::optional<proto::Program>& best) {
  if (!c.stop_reason.empty() || !best || c.proposed >= c.budget) return Status::ok();
  const double speedup = best->eval.correctness ? best->eval.runtime_improvement : -1;
  char buf[96];
  if (c.target_speedup > 0 && speedup >= c.target_speedup) {
    std::snprintf(buf, sizeof buf, "target speedup %.3gx reached (%.3gx)", c.target_speedup, speedup);
    c.stop_reason = buf;
  } else if (c.patience > 0) {
    KILN_ASSIGN_OR_RETURN(std::optional<int64_t> best_seq, store_.scored_seq(best->id));
    const int64_t since = best_seq ? c.scored - *best_seq : 0;
    if (since >= c.patience) c.stop_reason = "no improvement in " + std::to_string(since) + " proposals";
  }
  if (c.stop_reason.empty()) return Status::ok();
  return store_.save_control(c);
}

Status CampaignLifecycle::maybe_finish(CampaignRow& c) {
  if (c.state != kRunning || c.proposing()) return Status::ok();
  KILN_ASSIGN_OR_RETURN(int64_t programs, store_.pending_programs(c.id));
  KILN_ASSIGN_OR_RETURN(int64_t promotions, store_.pending_promotions(c.id));
  if (programs > 0 || promotions > 0) return Status::ok();
  c.state = std::string(kDone);
  c.finished_at = wall_time_s();
  return store_.save_state(c);
}

}  // namespace kiln::scorer
