#include "prompt_book.h"

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace kiln::scorer {

namespace {

// A prompt's fitness history kept for the rewrite request: the last this many scores.
constexpr size_t kPromptHistoryLength = 32;

struct ScoresBlob {
  std::vector<double> scores;
  template <class V>
  void fields(V& v) {
    v("scores", scores);
  }
};

}  // namespace

Result<proto::PromptStrategy> PromptBook::fittest(const std::string& campaign_id) {
  proto::PromptStrategy out;
  KILN_ASSIGN_OR_RETURN(
      auto st,
      store_.db().prepare("SELECT id, parent_id, text, fitness, uses, history FROM prompts WHERE campaign_id = ?"
                          " ORDER BY fitness DESC, seq LIMIT 1"));
  st.bind(1, campaign_id);
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return out;
  out.prompt_id = st.column_text(0);
  out.parent_prompt_id = st.column_text(1);
  out.text = st.column_text(2);
  out.fitness = st.column_double(3);
  out.uses = st.column_int(4);
  auto hist = proto::decode<ScoresBlob>(st.column_blob(5));
  if (hist.is_ok()) out.history = std::move(hist->scores);
  return out;
}

Status PromptBook::credit(const std::string& campaign_id, const proto::Program& p, const std::string& text) {
  auto id = p.metadata.find("prompt_id");
  if (id == p.metadata.end() || id->second.empty()) return Status::ok();
  auto parent = p.metadata.find("parent_prompt_id");
  store::Database& db = store_.db();
  KILN_ASSIGN_OR_RETURN(auto get,
                        db.prepare("SELECT fitness, uses, history FROM prompts WHERE campaign_id = ? AND id = ?"));
  get.bind(1, campaign_id).bind(2, id->second);
  KILN_ASSIGN_OR_RETURN(bool row, get.step());
  ScoresBlob hist;
  double fitness = p.eval.combined_score;
  int64_t uses = 1;
  if (row) {
    fitness = std::max(fitness, get.column_double(0));
    uses = get.column_int(1) + 1;
    auto h = proto::decode<ScoresBlob>(get.column_blob(2));
    if (h.is_ok()) hist = std::move(h).value();
  }
  hist.scores.push_back(p.eval.combined_score);
  if (hist.scores.size() > kPromptHistoryLength)
    hist.scores.erase(hist.scores.begin(), hist.scores.end() - static_cast<std::ptrdiff_t>(kPromptHistoryLength));
  if (row) {
    KILN_ASSIGN_OR_RETURN(
        auto up, db.prepare("UPDATE prompts SET fitness = ?, uses = ?, history = ? WHERE campaign_id = ? AND id = ?"));
    up.bind(1, fitness).bind(2, uses).bind_blob(3, proto::encode(hist)).bind(4, campaign_id).bind(5, id->second);
    return up.run();
  }
  KILN_ASSIGN_OR_RETURN(int64_t seq, store_.count("SELECT COUNT(*) FROM prompts WHERE campaign_id = ?", campaign_id));
  KILN_ASSIGN_OR_RETURN(auto ins,
                        db.prepare("INSERT INTO prompts(campaign_id, id, parent_id, text, fitness, uses, history, seq)"
                                   " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"));
  ins.bind(1, campaign_id).bind(2, id->second).bind(3, parent == p.metadata.end() ? std::string() : parent->second);
  ins.bind(4, text).bind(5, fitness).bind(6, uses).bind_blob(7, proto::encode(hist)).bind(8, seq);
  return ins.run();
}

}  // namespace kiln::scorer
