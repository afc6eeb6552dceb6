#include "results.h"

#include <charconv>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>

#include "kiln/archive/features.h"
#include "kiln/archive/scoring.h"
#include "kiln/core/time.h"
#include "kiln/task/task.h"

namespace kiln::scorer {

namespace {

int64_t to_count(const std::map<std::string, std::string>& m, const std::string& key) {
  auto it = m.find(key);
  if (it == m.end()) return 0;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  (void)p;
  return ec == std::errc() && v > 0 ? v : 0;
}

// The compiler accepts a proposal's code against the task kernel its compile request carried, which an
// external bridge writes itself; the campaign's own copy is the one Kiln trusts. A result whose code
// changed anything outside the editable regions becomes a proposal without code (perf_score 0).
void keep_to_regions(TaskSpecs& specs, const CampaignRow& c, proto::ScoreResult& r) {
  if (r.stage == proto::Stage::kPropose || r.cand.code.empty()) return;
  auto spec = specs.of(c);
  if (!spec.is_ok()) return;  // stored at the campaign's start, after the same validation
  Status st = task::check_regions_only(c.files.at((*spec)->kernel_file).data, r.cand.code);
  if (st.is_ok()) return;
  r.stage = proto::Stage::kPropose;
  r.error = st.message();
  r.build = {};
  r.test = {};
}

}  // namespace

Result<Results::Subject> Results::subject_of(const proto::ScoreResult& r, Effects& fx) {
  Subject s;
  s.pid = r.cand.program_id;
  s.confirm = r.purpose == proto::Purpose::kConfirm;
  const std::string cid = campaign_of(s.pid);
  fx.campaign_id = cid;
  if (!r.cand.campaign_id.empty() && r.cand.campaign_id != cid)
    return invalid_argument("result for " + s.pid + " names campaign '" + r.cand.campaign_id + "'");
  KILN_ASSIGN_OR_RETURN(auto camp, store_.load_campaign(cid));
  if (!camp) return not_found("result for " + s.pid + ": unknown campaign '" + cid + "'");
  KILN_ASSIGN_OR_RETURN(auto row, store_.load_program(s.pid));
  if (!row) return not_found("result for unknown program " + s.pid);
  s.campaign = std::move(*camp);
  s.program = std::move(*row);
  return s;
}

Status Results::on_result(std::string_view job_id, proto::ScoreResult r, Effects& fx) {
  KILN_ASSIGN_OR_RETURN(Subject subject, subject_of(r, fx));
  const std::string& pid = subject.pid;
  const std::string& cid = subject.campaign.id;
  CampaignRow& c = subject.campaign;
  ProgramRow& row = subject.program;
  if (subject.confirm) return promotions_.on_confirmation(job_id, c, pid, r, fx);

  if (row.state == kScored) return count_duplicate(store_, c, fx);
  keep_to_regions(specs_, c, r);
  KILN_ASSIGN_OR_RETURN(bool fresh, store_.insert_result(pid, proto::Purpose::kEval, cid, job_id, r));
  if (!fresh) return count_duplicate(store_, c, fx);

  proto::Program p = std::move(row.record);
  const proto::Candidate& cand = r.cand;
  if (!cand.code.empty()) p.code = cand.code;
  if (!cand.params.empty()) p.template_parameters = cand.params;
  p.is_templated = !p.template_parameters.empty();
  if (!cand.proposer.empty()) p.metadata["proposer"] = cand.proposer;
  if (!cand.notes.empty()) p.metadata["notes"] = cand.notes;
  p.metadata["stage"] = proto::name(r.stage);
  // What the proposer reports (model, prompt lineage, tokens); the strategy text goes to the prompts table.
  std::string prompt_text;
  for (const auto& [key, value] : cand.metadata) {
    if (key == "prompt_text")
      prompt_text = value;
    else if (key != "island" && key != "campaign_id" && key != "proposer")
      p.metadata[key] = value;
  }
  if (!r.test.worker.device_name.empty()) p.metadata["device"] = r.test.worker.device_name;
  if (!r.build.kernel_sha256.empty()) p.metadata["kernel_sha256"] = r.build.kernel_sha256;
  if (!cand.raw_llm_code.empty())
    p.raw_llm_code = archive::truncate_utf8(cand.raw_llm_code, proto::kMaxRawLlmCodeBytes);
  p.task = task_ref(c);
  p.eval = archive::evaluate(r);
  p.feedback = p.eval.eval_log;
  p.timestamp = wall_time_s();
  p.metrics["perf_score"] = static_cast<double>(p.eval.perf_score);
  p.metrics["combined_score"] = p.eval.combined_score;
  if (p.eval.runtime_improvement > 0) p.metrics["speedup"] = p.eval.runtime_improvement;
  KILN_ASSIGN_OR_RETURN(archive::Archive * archive, archives_.get(cid));
  if (std::string cell = archive->cell_of(p); !cell.empty()) p.metadata["cell"] = cell;
  // Against the archive as it stands before this program joins it: how new its behaviour is.
  p.complexity = static_cast<double>(archive::code_lines(p.code));
  p.diversity = archive->diversity_of(p);
  KILN_RETURN_IF_ERROR(store_.store_scored_program(c, p));
  const int64_t prompt_tokens = to_count(p.metadata, "prompt_tokens");
  const int64_t completion_tokens = to_count(p.metadata, "completion_tokens");
  if (prompt_tokens > 0 || completion_tokens > 0) {
    c.prompt_tokens += prompt_tokens;
    c.completion_tokens += completion_tokens;
    KILN_RETURN_IF_ERROR(store_.save_control(c));
  }
  KILN_RETURN_IF_ERROR(prompts_.credit(cid, p, prompt_text));

  archive->add(p);
  std::optional<proto::Program> best = archive->best();
  if (best && best->id != c.best_program_id) {
    c.best_program_id = best->id;
    KILN_RETURN_IF_ERROR(store_.save_best_program(c));
  }
  if (best && best->id == pid && archive::speedup_shortfall(r, options_.min_speedup).empty())
    KILN_RETURN_IF_ERROR(promotions_.request_confirmation(c, p, row.proposal_index, fx));
  KILN_RETURN_IF_ERROR(lifecycle_.check_early_stop(c, best));

  KILN_RETURN_IF_ERROR(proposals_.top_up(c, fx));
  return lifecycle_.maybe_finish(c);
}

Status Results::on_not_evaluated(const proto::ScoreResult& r, const std::string& why, Effects& fx) {
  KILN_ASSIGN_OR_RETURN(Subject subject, subject_of(r, fx));
  CampaignRow& c = subject.campaign;
  if (subject.confirm) return promotions_.on_confirmation_not_made(c, subject.pid, why, fx);
  if (subject.program.state != kPending) return count_duplicate(store_, c, fx);

  proto::Program p = std::move(subject.program.record);
  p.metadata["stage"] = proto::name(r.stage);
  p.eval.status = std::string(kNotEvaluated);
  p.eval.eval_log = archive::truncate_utf8(why, archive::kMaxEvalLogBytes);
  p.feedback = p.eval.eval_log;
  p.timestamp = wall_time_s();
  KILN_RETURN_IF_ERROR(store_.store_not_evaluated(subject.pid, p));
  KILN_RETURN_IF_ERROR(proposals_.top_up(c, fx));
  return lifecycle_.maybe_finish(c);
}

}  // namespace kiln::scorer
