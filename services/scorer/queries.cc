#include "queries.h"

#include <algorithm>
#include <utility>

#include "kiln/archive/scoring.h"

namespace kiln::scorer {

namespace {

// id -> parent_id, from `sql` with the campaign id bound.
Result<std::map<std::string, std::string>> parents(store::Database& db, std::string_view sql,
                                                   const std::string& campaign_id) {
  KILN_ASSIGN_OR_RETURN(auto st, db.prepare(sql));
  st.bind(1, campaign_id);
  std::map<std::string, std::string> parent_of;
  KILN_RETURN_IF_ERROR(st.for_each([&](const store::Statement& row) {
    parent_of[row.column_text(0)] = row.column_text(1);
    return Status::ok();
  }));
  return parent_of;
}

}  // namespace

Result<proto::CampaignList> Queries::campaigns(const proto::CampaignQuery& query) {
  proto::CampaignList list;
  std::vector<std::string> ids;
  if (!query.campaign_id.empty()) {
    ids.push_back(query.campaign_id);
  } else {
    KILN_ASSIGN_OR_RETURN(ids, campaign_ids(query.recent, &list.not_listed));
  }
  for (const auto& id : ids) {
    KILN_ASSIGN_OR_RETURN(auto row, store_.load_campaign(id));
    if (!row) continue;
    KILN_ASSIGN_OR_RETURN(proto::CampaignInfo info, campaign_info(*row));
    list.campaigns.push_back(std::move(info));
  }
  return list;
}

Result<proto::CampaignInfo> Queries::campaign(const std::string& campaign_id) {
  KILN_ASSIGN_OR_RETURN(auto row, store_.load_campaign(campaign_id));
  if (!row) return not_found("unknown campaign '" + campaign_id + "'");
  return campaign_info(*row);
}

Result<proto::BestPrograms> Queries::best(const proto::CampaignQuery& query) {
  KILN_ASSIGN_OR_RETURN(auto row, store_.load_campaign(query.campaign_id));
  if (!row) return not_found("unknown campaign '" + query.campaign_id + "'");
  return best_programs(*row, query.top);
}

Result<proto::CampaignInfo> Queries::campaign_info(const CampaignRow& c) {
  proto::CampaignInfo info;
  info.campaign_id = c.id;
  info.task_name = c.task_name;
  info.task_id = c.task_id;
  info.backend = c.backend;
  info.state = c.state;
  info.budget = c.budget;
  info.proposed = c.proposed;
  info.started_at = c.started_at;
  info.finished_at = c.finished_at;
  info.proposer = c.proposer;
  info.stop_reason = c.stop_reason;
  info.prompt_tokens = c.prompt_tokens;
  info.completion_tokens = c.completion_tokens;
  KILN_ASSIGN_OR_RETURN(info.prompts, store_.count("SELECT COUNT(*) FROM prompts WHERE campaign_id = ?", c.id));
  KILN_ASSIGN_OR_RETURN(info.cells_filled, archives_.cells_filled(c));
  KILN_ASSIGN_OR_RETURN(info.scored,
                        store_.count("SELECT COUNT(*) FROM programs WHERE campaign_id = ? AND state = 'scored'", c.id));
  KILN_ASSIGN_OR_RETURN(info.correct, store_.count("SELECT COUNT(*) FROM programs WHERE campaign_id = ?"
                                                   " AND state = 'scored' AND correct = 1",
                                                   c.id));
  KILN_ASSIGN_OR_RETURN(info.in_flight, store_.pending_programs(c.id));
  KILN_ASSIGN_OR_RETURN(info.not_evaluated, store_.count("SELECT COUNT(*) FROM programs WHERE campaign_id = ?"
                                                         " AND state = 'not_evaluated'",
                                                         c.id));
  if (info.not_evaluated > 0) {
    KILN_ASSIGN_OR_RETURN(auto why, store_.db().prepare("SELECT eval_log FROM programs WHERE campaign_id = ? AND"
                                                        " state = 'not_evaluated' ORDER BY rowid DESC LIMIT 1"));
    why.bind(1, c.id);
    KILN_ASSIGN_OR_RETURN(bool row, why.step());
    if (row) info.last_not_evaluated = why.column_text(0);
  }
  info.best_program_id = c.best_program_id;
  if (!c.best_program_id.empty()) {
    KILN_ASSIGN_OR_RETURN(auto best, store_.load_program(c.best_program_id));
    if (best) {
      const proto::EvalResult& e = best->record.eval;
      info.best_score = e.combined_score;
      info.best_speedup = e.runtime_improvement;
      if (e.runtime_improvement > 0) {
        auto lo = e.runtime_stats.find("speedup_lo");
        auto hi = e.runtime_stats.find("speedup_hi");
        if (lo != e.runtime_stats.end()) info.best_speedup_lo = lo->second;
        if (hi != e.runtime_stats.end()) info.best_speedup_hi = hi->second;
      }
      info.best_params = best->record.template_parameters;
    }
  }
  KILN_ASSIGN_OR_RETURN(
      auto st, store_.db().prepare(
                   "SELECT program_id, state, kernel_id, note FROM promotions WHERE campaign_id = ? ORDER BY rowid"));
  st.bind(1, c.id);
  KILN_RETURN_IF_ERROR(st.for_each([&](const store::Statement& row) {
    std::string program = row.column_text(0), state = row.column_text(1), note = row.column_text(3);
    if (state == promo::kPromoted) info.promoted.push_back(row.column_text(2));
    info.promotion_notes.push_back(program + ": " + (note.empty() ? state : note));
    return Status::ok();
  }));
  return info;
}

Result<std::vector<std::string>> Queries::campaign_ids(int64_t recent, int64_t* not_listed) {
  *not_listed = 0;
  if (recent > 0) {
    KILN_ASSIGN_OR_RETURN(int64_t ended,
                          store_.count("SELECT COUNT(*) FROM campaigns WHERE state != ?", std::string(kRunning)));
    *not_listed = std::max<int64_t>(0, ended - recent);
  }
  // The ended campaigns listed are the `recent` that finished last; all of them when recent is 0.
  KILN_ASSIGN_OR_RETURN(
      auto st, store_.db().prepare("SELECT id FROM campaigns WHERE state = ?1 OR ?2 <= 0 OR id IN (SELECT id FROM "
                                   "campaigns WHERE state != ?1 ORDER BY finished_at DESC, id DESC LIMIT ?2) "
                                   "ORDER BY started_at, id"));
  st.bind(1, kRunning).bind(2, recent);
  std::vector<std::string> ids;
  KILN_RETURN_IF_ERROR(st.for_each([&](const store::Statement& row) {
    ids.push_back(row.column_text(0));
    return Status::ok();
  }));
  return ids;
}

// EvalResult.template_results: every parameter set the campaign tried with this code and the best
// combined score each got, the kMaxTemplateResults best kept. Read when asked for, so it is complete.
Result<std::map<std::string, double>> Queries::template_results(const std::string& campaign_id,
                                                                const std::string& code) {
  KILN_ASSIGN_OR_RETURN(
      auto st,
      store_.db().prepare("SELECT record FROM programs WHERE campaign_id = ? AND state = 'scored' AND code = ?"));
  st.bind(1, campaign_id).bind(2, code);
  std::map<std::string, double> tried;
  KILN_RETURN_IF_ERROR(st.for_each([&](const store::Statement& row) -> Status {
    KILN_ASSIGN_OR_RETURN(proto::Program p, program_record(row, 0, "campaign " + campaign_id));
    auto [it, fresh] = tried.emplace(archive::params_string(p.template_parameters), p.eval.combined_score);
    if (!fresh) it->second = std::max(it->second, p.eval.combined_score);
    return Status::ok();
  }));
  if (tried.size() > proto::kMaxTemplateResults) {
    std::vector<std::pair<double, std::string>> ranked;
    for (const auto& [key, score] : tried) ranked.emplace_back(-score, key);
    std::sort(ranked.begin(), ranked.end());
    tried.clear();
    for (size_t i = 0; i < proto::kMaxTemplateResults; ++i) tried.emplace(ranked[i].second, -ranked[i].first);
  }
  return tried;
}

Result<proto::BestPrograms> Queries::best_programs(const CampaignRow& c, int64_t top) {
  store::Database& db = store_.db();
  proto::BestPrograms out;
  KILN_ASSIGN_OR_RETURN(out.campaign, campaign_info(c));
  // Lineage needs every program's parent, not only the top ones.
  KILN_ASSIGN_OR_RETURN(auto parent_of, parents(db, "SELECT id, parent_id FROM programs WHERE campaign_id = ?", c.id));
  KILN_ASSIGN_OR_RETURN(auto prompt_parent,
                        parents(db, "SELECT id, parent_id FROM prompts WHERE campaign_id = ?", c.id));
  KILN_ASSIGN_OR_RETURN(auto st, db.prepare("SELECT record FROM programs WHERE campaign_id = ? AND state = 'scored'"
                                            " ORDER BY combined_score DESC, scored_seq LIMIT ?"));
  st.bind(1, c.id).bind(2, top > 0 ? top : int64_t{5});
  std::vector<proto::Program> top_programs;
  KILN_RETURN_IF_ERROR(st.for_each([&](const store::Statement& row) -> Status {
    KILN_ASSIGN_OR_RETURN(proto::Program p, program_record(row, 0, "campaign " + c.id));
    top_programs.push_back(std::move(p));
    return Status::ok();
  }));
  for (proto::Program& p : top_programs) {
    // "p3 <- p1 <- p0": ancestors, nearest first. parent_of.size() bounds the walk if ids ever loop.
    std::string lineage;
    std::string at = p.parent_id;
    for (size_t steps = 0; !at.empty() && steps <= parent_of.size(); ++steps) {
      if (!lineage.empty()) lineage += ",";
      lineage += at;
      auto it = parent_of.find(at);
      at = it == parent_of.end() ? std::string() : it->second;
    }
    p.metadata["lineage"] = lineage;
    if (p.is_templated) {
      KILN_ASSIGN_OR_RETURN(p.eval.template_results, template_results(c.id, p.code));
    }
    // The strategy section's ancestry the same way: "s-b <- s-a".
    if (auto pid = p.metadata.find("prompt_id"); pid != p.metadata.end() && !pid->second.empty()) {
      std::string prompts = pid->second;
      std::string up = prompt_parent[pid->second];
      for (size_t steps = 0; !up.empty() && steps <= prompt_parent.size(); ++steps) {
        prompts += "," + up;
        auto it = prompt_parent.find(up);
        up = it == prompt_parent.end() ? std::string() : it->second;
      }
      p.metadata["prompt_lineage"] = prompts;
    }
    out.programs.push_back(std::move(p));
  }
  return out;
}

Result<std::map<std::string, double>> Queries::best_speedup_by_task() {
  KILN_ASSIGN_OR_RETURN(
      auto st,
      store_.db().prepare(
          "SELECT c.task_name, MAX(p.runtime_improvement) FROM campaigns c JOIN programs p ON p.id = c.best_program_id"
          " WHERE p.correct = 1 AND p.runtime_improvement > 0 GROUP BY c.task_name"));
  std::map<std::string, double> out;
  KILN_RETURN_IF_ERROR(st.for_each([&](const store::Statement& row) {
    out[row.column_text(0)] = row.column_double(1);
    return Status::ok();
  }));
  return out;
}

Result<int64_t> Queries::duplicates_ignored() {
  KILN_ASSIGN_OR_RETURN(auto st, store_.db().prepare("SELECT COALESCE(SUM(duplicates), 0) FROM campaigns"));
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  return row ? st.column_int(0) : int64_t{0};
}

}  // namespace kiln::scorer
