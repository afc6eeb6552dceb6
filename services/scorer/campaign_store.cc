#include "campaign_store.h"

#include <cstdio>
#include <map>
#include <utility>

#include "kiln/core/time.h"

namespace kiln::scorer {

namespace {

struct FilesBlob {
  proto::FileMap files;
  template <class V>
  void fields(V& v) {
    v("files", files);
  }
};

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out.push_back(ch);
    }
  }
  out.push_back('"');
  return out;
}

// Readable in the sqlite3 shell; the msgpack record stays the source of truth.
std::string params_json(const std::map<std::string, std::string>& params) {
  std::string out = "{";
  for (const auto& [k, v] : params) {
    if (out.size() > 1) out.push_back(',');
    out += json_string(k) + ":" + json_string(v);
  }
  return out + "}";
}

}  // namespace

Result<proto::Program> program_record(const store::Statement& row, int col, const std::string& owner) {
  auto rec = proto::decode<proto::Program>(row.column_blob(col));
  if (!rec.is_ok()) return internal_error(owner + ": stored record: " + rec.status().message());
  return rec;
}

CampaignStore::CampaignStore(store::Database db, ControlDefaults defaults) : db_(std::move(db)), defaults_(defaults) {}

Result<int64_t> CampaignStore::count(std::string_view sql, const std::string& campaign_id) {
  KILN_ASSIGN_OR_RETURN(auto st, db_.prepare(sql));
  st.bind(1, campaign_id);
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  return row ? st.column_int(0) : int64_t{0};
}

// ------------------------------------------------------------------------------------------- campaigns

Result<std::optional<CampaignRow>> CampaignStore::load_campaign(const std::string& id) {
  KILN_ASSIGN_OR_RETURN(
      auto st,
      db_.prepare("SELECT id, task_id, task_name, backend, op, dtype, files, budget, proposer, max_in_flight, proposed,"
                  " scored, duplicates, state, best_program_id, submitted_at, started_at, finished_at"
                  " FROM campaigns WHERE id = ?"));
  st.bind(1, id);
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return std::optional<CampaignRow>{};
  CampaignRow c;
  c.id = st.column_text(0);
  c.task_id = st.column_text(1);
  c.task_name = st.column_text(2);
  auto backend = proto::parse_backend(st.column_text(3));
  if (!backend.is_ok()) return internal_error("campaign " + id + ": stored " + backend.status().message());
  c.backend = *backend;
  c.op = st.column_text(4);
  c.dtype = st.column_text(5);
  auto files = proto::decode<FilesBlob>(st.column_blob(6));
  if (!files.is_ok()) return internal_error("campaign " + id + ": stored files: " + files.status().message());
  c.files = std::move(files->files);
  c.budget = st.column_int(7);
  c.proposer = st.column_text(8);
  c.max_in_flight = st.column_int(9);
  c.proposed = st.column_int(10);
  c.scored = st.column_int(11);
  c.duplicates = st.column_int(12);
  c.state = st.column_text(13);
  c.best_program_id = st.column_text(14);
  c.submitted_at = st.column_double(15);
  c.started_at = st.column_double(16);
  c.finished_at = st.column_double(17);
  KILN_ASSIGN_OR_RETURN(
      auto ctl,
      db_.prepare("SELECT target_speedup, patience, stop_reason, prompt_tokens, completion_tokens FROM campaign_control"
                  " WHERE campaign_id = ?"));
  ctl.bind(1, id);
  KILN_ASSIGN_OR_RETURN(bool has_ctl, ctl.step());
  if (has_ctl) {
    c.target_speedup = ctl.column_double(0);
    c.patience = ctl.column_int(1);
    c.stop_reason = ctl.column_text(2);
    c.prompt_tokens = ctl.column_int(3);
    c.completion_tokens = ctl.column_int(4);
  } else {
    c.target_speedup = defaults_.target_speedup;
    c.patience = defaults_.patience;
  }
  return std::optional<CampaignRow>(std::move(c));
}

Status CampaignStore::insert_campaign(const CampaignRow& c) {
  KILN_ASSIGN_OR_RETURN(
      auto ins,
      db_.prepare(
          "INSERT INTO campaigns(id, task_id, task_name, backend, op, dtype, files, budget, proposer, max_in_flight,"
          " state, submitted_at, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
  ins.bind(1, c.id)
      .bind(2, c.task_id)
      .bind(3, c.task_name)
      .bind(4, proto::name(c.backend))
      .bind(5, c.op)
      .bind(6, c.dtype);
  ins.bind_blob(7, proto::encode(FilesBlob{c.files})).bind(8, c.budget).bind(9, c.proposer);
  ins.bind(10, c.max_in_flight).bind(11, c.state).bind(12, c.submitted_at).bind(13, c.started_at);
  KILN_RETURN_IF_ERROR(ins.run());
  return save_control(c);
}

Status CampaignStore::save_control(const CampaignRow& c) {
  KILN_ASSIGN_OR_RETURN(
      auto st,
      db_.prepare("INSERT INTO campaign_control(campaign_id, target_speedup, patience, stop_reason, prompt_tokens,"
                  " completion_tokens) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(campaign_id) DO UPDATE SET"
                  " target_speedup = excluded.target_speedup, patience = excluded.patience,"
                  " stop_reason = excluded.stop_reason, prompt_tokens = excluded.prompt_tokens,"
                  " completion_tokens = excluded.completion_tokens"));
  st.bind(1, c.id).bind(2, c.target_speedup).bind(3, c.patience).bind(4, c.stop_reason);
  st.bind(5, c.prompt_tokens).bind(6, c.completion_tokens);
  return st.run();
}

Result<std::optional<int64_t>> CampaignStore::saved_cells_filled(const std::string& campaign_id) {
  KILN_ASSIGN_OR_RETURN(auto st, db_.prepare("SELECT cells_filled FROM campaign_summary WHERE campaign_id = ?"));
  st.bind(1, campaign_id);
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  return row ? std::optional<int64_t>(st.column_int(0)) : std::nullopt;
}

Status CampaignStore::save_cells_filled(const std::string& campaign_id, int64_t cells) {
  KILN_ASSIGN_OR_RETURN(
      auto st, db_.prepare("INSERT OR REPLACE INTO campaign_summary(campaign_id, cells_filled) VALUES (?, ?)"));
  st.bind(1, campaign_id).bind(2, cells);
  return st.run();
}

Status CampaignStore::save_proposed(const CampaignRow& c) {
  KILN_ASSIGN_OR_RETURN(auto st, db_.prepare("UPDATE campaigns SET proposed = ? WHERE id = ?"));
  st.bind(1, c.proposed).bind(2, c.id);
  return st.run();
}

Status CampaignStore::save_best_program(const CampaignRow& c) {
  KILN_ASSIGN_OR_RETURN(auto st, db_.prepare("UPDATE campaigns SET best_program_id = ? WHERE id = ?"));
  st.bind(1, c.best_program_id).bind(2, c.id);
  return st.run();
}

Status CampaignStore::save_state(const CampaignRow& c) {
  KILN_ASSIGN_OR_RETURN(auto st, db_.prepare("UPDATE campaigns SET state = ?, finished_at = ? WHERE id = ?"));
  st.bind(1, c.state).bind(2, c.finished_at).bind(3, c.id);
  return st.run();
}

Status CampaignStore::add_duplicate(CampaignRow& c) {
  ++c.duplicates;
  KILN_ASSIGN_OR_RETURN(auto st, db_.prepare("UPDATE campaigns SET duplicates = ? WHERE id = ?"));
  st.bind(1, c.duplicates).bind(2, c.id);
  return st.run();
}

// -------------------------------------------------------------------------------------------- programs

Result<std::optional<ProgramRow>> CampaignStore::load_program(const std::string& id) {
  KILN_ASSIGN_OR_RETURN(auto st,
                        db_.prepare("SELECT campaign_id, state, proposal_index, record FROM programs WHERE id = ?"));
  st.bind(1, id);
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return std::optional<ProgramRow>{};
  ProgramRow p;
  p.campaign_id = st.column_text(0);
  p.state = st.column_text(1);
  p.proposal_index = st.column_int(2);
  KILN_ASSIGN_OR_RETURN(p.record, program_record(st, 3, "program " + id));
  return std::optional<ProgramRow>(std::move(p));
}

Status CampaignStore::insert_program(const CampaignRow& c, const proto::Program& p, int64_t proposal_index,
                                     std::string_view proposer) {
  KILN_ASSIGN_OR_RETURN(
      auto st,
      db_.prepare("INSERT INTO programs(id, campaign_id, proposal_index, parent_id, generation, proposer, state, code,"
                  " params, record, created_at) VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?)"));
  st.bind(1, p.id).bind(2, c.id).bind(3, proposal_index).bind(4, p.parent_id).bind(5, p.generation);
  st.bind(6, proposer).bind(7, p.code).bind(8, params_json(p.template_parameters));
  st.bind_blob(9, proto::encode(p)).bind(10, wall_time_s());
  return st.run();
}

Status CampaignStore::store_scored_program(CampaignRow& c, const proto::Program& p) {
  ++c.scored;
  KILN_ASSIGN_OR_RETURN(
      auto st,
      db_.prepare(
          "UPDATE programs SET state = 'scored', scored_seq = ?, code = ?, params = ?, proposer = ?,"
          " perf_score = ?, combined_score = ?, correct = ?, runtime_ms = ?, runtime_improvement = ?, status = ?,"
          " eval_log = ?, record = ?, scored_at = ? WHERE id = ?"));
  st.bind(1, c.scored).bind(2, p.code).bind(3, params_json(p.template_parameters));
  auto proposer = p.metadata.find("proposer");
  st.bind(4, proposer == p.metadata.end() ? std::string() : proposer->second);
  st.bind(5, p.eval.perf_score).bind(6, p.eval.combined_score).bind(7, p.eval.correctness ? 1 : 0);
  st.bind(8, p.eval.runtime).bind(9, p.eval.runtime_improvement).bind(10, p.eval.status);
  st.bind(11, p.eval.eval_log).bind_blob(12, proto::encode(p)).bind(13, p.timestamp).bind(14, p.id);
  KILN_RETURN_IF_ERROR(st.run());
  KILN_ASSIGN_OR_RETURN(auto cs, db_.prepare("UPDATE campaigns SET scored = ? WHERE id = ?"));
  cs.bind(1, c.scored).bind(2, c.id);
  return cs.run();
}

Status CampaignStore::store_not_evaluated(const std::string& program_id, const proto::Program& p) {
  KILN_ASSIGN_OR_RETURN(
      auto st, db_.prepare("UPDATE programs SET state = ?, status = ?, eval_log = ?, record = ? WHERE id = ?"));
  st.bind(1, kNotEvaluated).bind(2, kNotEvaluated).bind(3, p.eval.eval_log).bind_blob(4, proto::encode(p));
  st.bind(5, program_id);
  return st.run();
}

Result<std::optional<int64_t>> CampaignStore::scored_seq(const std::string& program_id) {
  KILN_ASSIGN_OR_RETURN(auto st, db_.prepare("SELECT scored_seq FROM programs WHERE id = ?"));
  st.bind(1, program_id);
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return std::optional<int64_t>{};
  return std::optional<int64_t>(st.column_int(0));
}

Status CampaignStore::for_each_scored(const std::string& campaign_id,
                                      const std::function<void(const proto::Program&)>& fn) {
  KILN_ASSIGN_OR_RETURN(
      auto st,
      db_.prepare("SELECT id, record FROM programs WHERE campaign_id = ? AND state = 'scored' ORDER BY scored_seq"));
  st.bind(1, campaign_id);
  return st.for_each([&](const store::Statement& row) -> Status {
    KILN_ASSIGN_OR_RETURN(proto::Program p, program_record(row, 1, "program " + row.column_text(0)));
    fn(p);
    return Status::ok();
  });
}

Result<int64_t> CampaignStore::pending_programs(const std::string& campaign_id) {
  return count("SELECT COUNT(*) FROM programs WHERE campaign_id = ? AND state = 'pending'", campaign_id);
}

// --------------------------------------------------------------------------------------------- results

Result<bool> CampaignStore::insert_result(const std::string& program_id, proto::Purpose purpose,
                                          const std::string& campaign_id, std::string_view job_id,
                                          const proto::ScoreResult& r) {
  KILN_ASSIGN_OR_RETURN(
      auto st,
      db_.prepare("INSERT OR IGNORE INTO results(program_id, purpose, campaign_id, job_id, payload, received_at)"
                  " VALUES (?, ?, ?, ?, ?, ?)"));
  st.bind(1, program_id)
      .bind(2, proto::name(purpose))
      .bind(3, campaign_id)
      .bind(4, job_id)
      .bind_blob(5, proto::encode(r));
  st.bind(6, wall_time_s());
  KILN_RETURN_IF_ERROR(st.run());
  return db_.changes() > 0;
}

Result<std::optional<proto::ScoreResult>> CampaignStore::load_result(const std::string& program_id,
                                                                     proto::Purpose purpose) {
  KILN_ASSIGN_OR_RETURN(auto st, db_.prepare("SELECT payload FROM results WHERE program_id = ? AND purpose = ?"));
  st.bind(1, program_id).bind(2, proto::name(purpose));
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return std::optional<proto::ScoreResult>{};
  auto r = proto::decode<proto::ScoreResult>(st.column_blob(0));
  if (!r.is_ok()) return internal_error("result of " + program_id + ": " + r.status().message());
  return std::optional<proto::ScoreResult>(std::move(r).value());
}

// ------------------------------------------------------------------------------------------ promotions

Result<bool> CampaignStore::insert_promotion(const std::string& program_id, const std::string& campaign_id) {
  KILN_ASSIGN_OR_RETURN(
      auto st, db_.prepare("INSERT OR IGNORE INTO promotions(program_id, campaign_id, state, requested_at, updated_at)"
                           " VALUES (?, ?, ?, ?, ?)"));
  double now = wall_time_s();
  st.bind(1, program_id).bind(2, campaign_id).bind(3, promo::kConfirming).bind(4, now).bind(5, now);
  KILN_RETURN_IF_ERROR(st.run());
  return db_.changes() > 0;
}

Result<std::optional<std::string>> CampaignStore::promotion_state(const std::string& program_id) {
  KILN_ASSIGN_OR_RETURN(auto st, db_.prepare("SELECT state FROM promotions WHERE program_id = ?"));
  st.bind(1, program_id);
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return std::optional<std::string>{};
  return std::optional<std::string>(st.column_text(0));
}

Status CampaignStore::set_promotion(const std::string& program_id, std::string_view state, std::string_view kernel_id,
                                    std::string_view note) {
  KILN_ASSIGN_OR_RETURN(
      auto st,
      db_.prepare("UPDATE promotions SET state = ?, kernel_id = ?, note = ?, updated_at = ? WHERE program_id = ?"));
  st.bind(1, state).bind(2, kernel_id).bind(3, note).bind(4, wall_time_s()).bind(5, program_id);
  return st.run();
}

Result<int64_t> CampaignStore::pending_promotions(const std::string& campaign_id) {
  return count("SELECT COUNT(*) FROM promotions WHERE campaign_id = ? AND state IN ('confirming', 'promoting')",
               campaign_id);
}

// -------------------------------------------------------------------------------------- processed jobs

Result<std::optional<messaging::JobOutcome>> CampaignStore::processed(std::string_view job_id) {
  KILN_ASSIGN_OR_RETURN(auto st, db_.prepare("SELECT result FROM processed_jobs WHERE job_id = ?"));
  st.bind(1, job_id);
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return std::optional<messaging::JobOutcome>{};
  auto msg = proto::decode<proto::ResultMsg>(st.column_blob(0));
  if (!msg.is_ok()) return internal_error("processed job " + std::string(job_id) + ": " + msg.status().message());
  return std::optional<messaging::JobOutcome>(messaging::from_result(std::move(msg).value()));
}

Status CampaignStore::record_processed(std::string_view job_id, std::string_view kind, const std::string& campaign_id,
                                       const messaging::JobOutcome& answer) {
  proto::Job job;
  job.job_id = std::string(job_id);
  job.service = std::string(proto::svc::kScore);
  const proto::ResultMsg result = messaging::to_result(job, answer);
  KILN_ASSIGN_OR_RETURN(
      auto put,
      db_.prepare(
          "INSERT INTO processed_jobs(job_id, kind, campaign_id, result, processed_at) VALUES (?, ?, ?, ?, ?)"));
  put.bind(1, job_id).bind(2, kind).bind(3, campaign_id).bind_blob(4, proto::encode(result));
  put.bind(5, wall_time_s());
  return put.run();
}

}  // namespace kiln::scorer
