#include "kiln/scorer/engine.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "kiln/archive/scoring.h"
#include "kiln/core/time.h"
#include "kiln/store/sqlite.h"
#include "kiln/task/task.h"
#include "schema.h"

namespace kiln::scorer {

using namespace kiln::archive;  // scoring, features, MAP-Elites

namespace {

constexpr std::string_view kRunning = "running";
constexpr std::string_view kDone = "done";
constexpr std::string_view kPending = "pending";
constexpr std::string_view kScored = "scored";
// A program whose job died by faults that were not its own (DeadLetter::worker_retry): no score, no place
// in the archive. Its state and its status word.
constexpr std::string_view kNotEvaluated = "not_evaluated";
constexpr std::string_view kEval = "eval";
constexpr std::string_view kConfirm = "confirm";
constexpr std::string_view kProgram0Proposer = "program0";

// Promotion states: a program asks for confirmation, then promotion; the last four are final.
namespace promo {
constexpr std::string_view kConfirming = "confirming";
constexpr std::string_view kPromoting = "promoting";
constexpr std::string_view kPromoted = "promoted";
constexpr std::string_view kRefused = "refused";
constexpr std::string_view kNotConfirmed = "not_confirmed";
constexpr std::string_view kFailed = "failed";
}  // namespace promo

constexpr std::string_view kLlmProposer = "llm";
constexpr std::string_view kExternalProposer = "external";
// A prompt's fitness history kept for the rewrite request: the last this many scores.
constexpr size_t kPromptHistoryLength = 32;

struct ScoresBlob {
  std::vector<double> scores;
  template <class V> void fields(V& v) { v("scores", scores); }
};

struct FilesBlob {
  proto::FileMap files;
  template <class V> void fields(V& v) { v("files", files); }
};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string strip_confirm(std::string_view program_id) {
  return std::string(program_id.substr(0, program_id.size() - kConfirmSuffix.size()));
}

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

// Bad input is answered "failed" (retrying cannot help); anything else is the database's fault.
bool is_rejection(const Status& st) {
  return st.code() == StatusCode::kInvalidArgument || st.code() == StatusCode::kNotFound ||
         st.code() == StatusCode::kFailedPrecondition;
}

struct CampaignRow {
  std::string id, task_id, task_name, backend, op, dtype, proposer, state, best_program_id;
  proto::FileMap files;
  int64_t budget = 0, max_in_flight = 1, proposed = 0, scored = 0, duplicates = 0;
  double submitted_at = 0, started_at = 0, finished_at = 0;
  // campaign_control (absent for campaigns of a version-1 archive: the engine's defaults then)
  double target_speedup = 0;
  int64_t patience = 0;
  std::string stop_reason;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  // Proposals stop at the budget or at an early stop.
  bool proposing() const { return proposed < budget && stop_reason.empty(); }
};

int64_t to_count(const std::map<std::string, std::string>& m, const std::string& key) {
  auto it = m.find(key);
  if (it == m.end()) return 0;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  (void)p;
  return ec == std::errc() && v > 0 ? v : 0;
}

struct ProgramRow {
  std::string campaign_id;
  std::string state;
  int64_t proposal_index = 0;
  proto::Program record;
};

// What handling one job decided, before it is committed.
struct Effects {
  std::vector<proto::FollowUp> next;
  std::string payload;
  std::string campaign_id;
  bool duplicate = false;
};

proto::FollowUp follow_up(std::string_view service, std::string job_id, std::string payload) {
  proto::FollowUp f;
  f.service = std::string(service);
  f.job_id = std::move(job_id);
  f.payload.data = std::move(payload);
  return f;
}

}  // namespace

std::string_view proposal_service_for(std::string_view proposer) {
  return proposer == kExternalProposer ? proto::svc::kProposeExternal : proto::svc::kPropose;
}

std::string program_id_for(std::string_view campaign_id, int64_t index) {
  return std::string(campaign_id) + "/p" + std::to_string(index);
}

std::string campaign_of(std::string_view program_id) {
  size_t pos = program_id.rfind("/p");
  if (pos == std::string_view::npos || pos == 0) return {};
  return std::string(program_id.substr(0, pos));
}

// ------------------------------------------------------------------------------------------- Impl

struct CampaignEngine::Impl {
  store::Database db;
  EngineOptions options;
  // Guards db and archives: jobs and queries arrive on different threads.
  std::mutex mu;
  // Archives rebuilt from the programs table on first use; dropped whenever a transaction fails so the
  // in-memory view never runs ahead of what was committed.
  std::map<std::string, std::unique_ptr<Archive>> archives;

  Impl(store::Database d, EngineOptions o) : db(std::move(d)), options(std::move(o)) {}

  std::string arch_for(std::string_view backend) const {
    return backend == "cuda" ? options.cuda_arch : std::string("native");
  }

  // ----------------------------------------------------------------------------- reading rows

  Result<std::optional<CampaignRow>> load_campaign(const std::string& id) {
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare(
        "SELECT id, task_id, task_name, backend, op, dtype, files, budget, proposer, max_in_flight, proposed,"
        " scored, duplicates, state, best_program_id, submitted_at, started_at, finished_at"
        " FROM campaigns WHERE id = ?"));
    st.bind(1, id);
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) return std::optional<CampaignRow>{};
    CampaignRow c;
    c.id = st.column_text(0);
    c.task_id = st.column_text(1);
    c.task_name = st.column_text(2);
    c.backend = st.column_text(3);
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
    KILN_ASSIGN_OR_RETURN(auto ctl, db.prepare(
        "SELECT target_speedup, patience, stop_reason, prompt_tokens, completion_tokens FROM campaign_control"
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
      c.target_speedup = options.target_speedup;
      c.patience = options.patience;
    }
    return std::optional<CampaignRow>(std::move(c));
  }

  Result<std::optional<ProgramRow>> load_program(const std::string& id) {
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare(
        "SELECT campaign_id, state, proposal_index, record FROM programs WHERE id = ?"));
    st.bind(1, id);
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) return std::optional<ProgramRow>{};
    ProgramRow p;
    p.campaign_id = st.column_text(0);
    p.state = st.column_text(1);
    p.proposal_index = st.column_int(2);
    auto rec = proto::decode<proto::Program>(st.column_blob(3));
    if (!rec.is_ok()) return internal_error("program " + id + ": stored record: " + rec.status().message());
    p.record = std::move(rec).value();
    return std::optional<ProgramRow>(std::move(p));
  }

  Result<int64_t> count(std::string_view sql, const std::string& campaign_id) {
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare(sql));
    st.bind(1, campaign_id);
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    return row ? st.column_int(0) : int64_t{0};
  }
  Result<int64_t> pending_programs(const std::string& cid) {
    return count("SELECT COUNT(*) FROM programs WHERE campaign_id = ? AND state = 'pending'", cid);
  }
  Result<int64_t> pending_promotions(const std::string& cid) {
    return count("SELECT COUNT(*) FROM promotions WHERE campaign_id = ? AND state IN ('confirming', 'promoting')",
                 cid);
  }

  Result<std::optional<proto::ScoreResult>> load_result(const std::string& program_id, std::string_view purpose) {
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare("SELECT payload FROM results WHERE program_id = ? AND purpose = ?"));
    st.bind(1, program_id).bind(2, purpose);
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) return std::optional<proto::ScoreResult>{};
    auto r = proto::decode<proto::ScoreResult>(st.column_blob(0));
    if (!r.is_ok()) return internal_error("result of " + program_id + ": " + r.status().message());
    return std::optional<proto::ScoreResult>(std::move(r).value());
  }

  Result<std::optional<std::string>> promotion_state(const std::string& program_id) {
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare("SELECT state FROM promotions WHERE program_id = ?"));
    st.bind(1, program_id);
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) return std::optional<std::string>{};
    return std::optional<std::string>(st.column_text(0));
  }

  Result<Archive*> archive_for(const std::string& cid) {
    if (auto it = archives.find(cid); it != archives.end()) return it->second.get();
    std::unique_ptr<Archive> archive;
    if (options.archive == "elites") archive = std::make_unique<EliteArchive>(options.elites);
    else archive = std::make_unique<MapElitesArchive>(options.map_elites);
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare(
        "SELECT id, record FROM programs WHERE campaign_id = ? AND state = 'scored' ORDER BY scored_seq"));
    st.bind(1, cid);
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool row, st.step());
      if (!row) break;
      auto rec = proto::decode<proto::Program>(st.column_blob(1));
      if (!rec.is_ok()) return internal_error("program " + st.column_text(0) + ": " + rec.status().message());
      archive->add(*rec);
    }
    Archive* raw = archive.get();
    archives[cid] = std::move(archive);
    return raw;
  }

  // ----------------------------------------------------------------------------- writing rows

  Status insert_program(const CampaignRow& c, const proto::Program& p, int64_t proposal_index,
                        std::string_view proposer) {
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare(
        "INSERT INTO programs(id, campaign_id, proposal_index, parent_id, generation, proposer, state, code,"
        " params, record, created_at) VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?)"));
    st.bind(1, p.id).bind(2, c.id).bind(3, proposal_index).bind(4, p.parent_id).bind(5, p.generation);
    st.bind(6, proposer).bind(7, p.code).bind(8, params_json(p.template_parameters));
    st.bind_blob(9, proto::encode(p)).bind(10, wall_time_s());
    return st.run();
  }

  Status store_scored_program(CampaignRow& c, const proto::Program& p) {
    ++c.scored;
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare(
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
    KILN_ASSIGN_OR_RETURN(auto cs, db.prepare("UPDATE campaigns SET scored = ? WHERE id = ?"));
    cs.bind(1, c.scored).bind(2, c.id);
    return cs.run();
  }

  // false when a result for this program and purpose was already stored.
  Result<bool> insert_result(const std::string& program_id, std::string_view purpose, const std::string& cid,
                             std::string_view job_id, const proto::ScoreResult& r) {
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare(
        "INSERT OR IGNORE INTO results(program_id, purpose, campaign_id, job_id, payload, received_at)"
        " VALUES (?, ?, ?, ?, ?, ?)"));
    st.bind(1, program_id).bind(2, purpose).bind(3, cid).bind(4, job_id).bind_blob(5, proto::encode(r));
    st.bind(6, wall_time_s());
    KILN_RETURN_IF_ERROR(st.run());
    return db.changes() > 0;
  }

  Status count_duplicate(CampaignRow& c, Effects& fx) {
    fx.duplicate = true;
    ++c.duplicates;
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare("UPDATE campaigns SET duplicates = ? WHERE id = ?"));
    st.bind(1, c.duplicates).bind(2, c.id);
    return st.run();
  }

  Status set_promotion(const std::string& program_id, std::string_view state, std::string_view kernel_id,
                       std::string_view note) {
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare(
        "UPDATE promotions SET state = ?, kernel_id = ?, note = ?, updated_at = ? WHERE program_id = ?"));
    st.bind(1, state).bind(2, kernel_id).bind(3, note).bind(4, wall_time_s()).bind(5, program_id);
    return st.run();
  }

  Status save_control(const CampaignRow& c) {
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare(
        "INSERT INTO campaign_control(campaign_id, target_speedup, patience, stop_reason, prompt_tokens,"
        " completion_tokens) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(campaign_id) DO UPDATE SET"
        " target_speedup = excluded.target_speedup, patience = excluded.patience,"
        " stop_reason = excluded.stop_reason, prompt_tokens = excluded.prompt_tokens,"
        " completion_tokens = excluded.completion_tokens"));
    st.bind(1, c.id).bind(2, c.target_speedup).bind(3, c.patience).bind(4, c.stop_reason);
    st.bind(5, c.prompt_tokens).bind(6, c.completion_tokens);
    return st.run();
  }

  // ----------------------------------------------------------------------------- meta-prompts

  // The strategy a proposal uses: the campaign's fittest (ties: the oldest); none before the first.
  Result<proto::PromptStrategy> fittest_prompt(const std::string& cid) {
    proto::PromptStrategy out;
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare(
        "SELECT id, parent_id, text, fitness, uses, history FROM prompts WHERE campaign_id = ?"
        " ORDER BY fitness DESC, seq LIMIT 1"));
    st.bind(1, cid);
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

  // Credits a scored program to the strategy that produced it (recorded on first sight).
  Status credit_prompt(const std::string& cid, const proto::Program& p, const std::string& text) {
    auto id = p.metadata.find("prompt_id");
    if (id == p.metadata.end() || id->second.empty()) return Status::ok();
    auto parent = p.metadata.find("parent_prompt_id");
    KILN_ASSIGN_OR_RETURN(auto get, db.prepare(
        "SELECT fitness, uses, history FROM prompts WHERE campaign_id = ? AND id = ?"));
    get.bind(1, cid).bind(2, id->second);
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
      KILN_ASSIGN_OR_RETURN(auto up, db.prepare(
          "UPDATE prompts SET fitness = ?, uses = ?, history = ? WHERE campaign_id = ? AND id = ?"));
      up.bind(1, fitness).bind(2, uses).bind_blob(3, proto::encode(hist)).bind(4, cid).bind(5, id->second);
      return up.run();
    }
    KILN_ASSIGN_OR_RETURN(int64_t seq, count("SELECT COUNT(*) FROM prompts WHERE campaign_id = ?", cid));
    KILN_ASSIGN_OR_RETURN(auto ins, db.prepare(
        "INSERT INTO prompts(campaign_id, id, parent_id, text, fitness, uses, history, seq)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"));
    ins.bind(1, cid).bind(2, id->second).bind(3, parent == p.metadata.end() ? std::string() : parent->second);
    ins.bind(4, text).bind(5, fitness).bind(6, uses).bind_blob(7, proto::encode(hist)).bind(8, seq);
    return ins.run();
  }

  // ----------------------------------------------------------------------------- early stop

  Status check_early_stop(CampaignRow& c, const std::optional<proto::Program>& best) {
    if (!c.stop_reason.empty() || !best || c.proposed >= c.budget) return Status::ok();
    const double speedup = best->eval.correctness ? best->eval.runtime_improvement : -1;
    char buf[96];
    if (c.target_speedup > 0 && speedup >= c.target_speedup) {
      std::snprintf(buf, sizeof buf, "target speedup %.3gx reached (%.3gx)", c.target_speedup, speedup);
      c.stop_reason = buf;
    } else if (c.patience > 0) {
      KILN_ASSIGN_OR_RETURN(auto st, db.prepare("SELECT scored_seq FROM programs WHERE id = ?"));
      st.bind(1, best->id);
      KILN_ASSIGN_OR_RETURN(bool row, st.step());
      const int64_t since = row ? c.scored - st.column_int(0) : 0;
      if (since >= c.patience) c.stop_reason = "no improvement in " + std::to_string(since) + " proposals";
    }
    if (c.stop_reason.empty()) return Status::ok();
    return save_control(c);
  }

  Status maybe_finish(CampaignRow& c) {
    if (c.state != kRunning || c.proposing()) return Status::ok();
    KILN_ASSIGN_OR_RETURN(int64_t programs, pending_programs(c.id));
    KILN_ASSIGN_OR_RETURN(int64_t promotions, pending_promotions(c.id));
    if (programs > 0 || promotions > 0) return Status::ok();
    c.state = std::string(kDone);
    c.finished_at = wall_time_s();
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare("UPDATE campaigns SET state = ?, finished_at = ? WHERE id = ?"));
    st.bind(1, c.state).bind(2, c.finished_at).bind(3, c.id);
    return st.run();
  }

  // ----------------------------------------------------------------------------- candidates

  static proto::TaskRef task_ref(const CampaignRow& c) {
    proto::TaskRef t;
    t.task_id = c.task_id;
    t.name = c.task_name;
    t.op = c.op;
    t.backend = c.backend;
    t.dtype = c.dtype;
    return t;
  }

  proto::Candidate candidate_of(const CampaignRow& c, const proto::Program& p, int64_t proposal_index) const {
    proto::Candidate cand;
    cand.campaign_id = c.id;
    cand.program_id = p.id;
    cand.parent_id = p.parent_id;
    cand.generation = p.generation;
    cand.proposal_index = proposal_index;
    if (auto it = p.metadata.find("proposer"); it != p.metadata.end()) cand.proposer = it->second;
    cand.code = p.code;
    cand.params = p.template_parameters;
    if (auto it = p.metadata.find("notes"); it != p.metadata.end()) cand.notes = it->second;
    return cand;
  }

  Status issue_proposal(CampaignRow& c, Effects& fx) {
    const int64_t index = c.proposed + 1;
    const std::string pid = program_id_for(c.id, index);
    const uint64_t seed = seed_from(c.id + "#" + std::to_string(index));
    Rng rng(seed);

    KILN_ASSIGN_OR_RETURN(Archive * archive, archive_for(c.id));
    // Proposals go round the islands, so each island evolves its own line.
    const int64_t islands = std::max<int64_t>(options.map_elites.islands, 1);
    const int64_t island = (index - 1) % islands;
    Selection sel = archive->select(rng, island);
    std::optional<proto::Program> parent = std::move(sel.parent);
    if (!parent) {
      // Nothing scored yet: every early proposal starts from program 0.
      KILN_ASSIGN_OR_RETURN(auto p0, load_program(program_id_for(c.id, 0)));
      if (!p0) return internal_error("campaign " + c.id + ": program 0 is missing");
      parent = std::move(p0->record);
      sel.parent_cell = archive->cell_of(*parent);
      sel.target_cell = sel.parent_cell;
      sel.mode = "program0";
    }

    proto::Program child;
    child.id = pid;
    child.parent_id = parent->id;
    child.generation = parent->generation + 1;
    child.iteration_found = index;
    child.language = c.backend == "cuda" ? "cuda" : "cpp";
    child.task = task_ref(c);
    child.metadata["proposer"] = c.proposer;
    child.metadata["campaign_id"] = c.id;
    child.metadata["island"] = std::to_string(island);
    child.metadata["selection"] = sel.mode;
    if (!sel.target_cell.empty()) child.metadata["target_cell"] = sel.target_cell;
    KILN_RETURN_IF_ERROR(insert_program(c, child, index, c.proposer));

    proto::ProposalRequest req;
    req.parent = candidate_of(c, *parent, parent->iteration_found);
    req.program_id = pid;
    req.proposal_index = index;
    req.proposer = c.proposer;
    req.parent_eval_log = parent->eval.eval_log;
    req.seed = static_cast<int64_t>(seed >> 1);  // non-negative
    req.files = c.files;
    req.island = island;
    req.budget = c.budget;
    req.tuner_blocks = options.tuner_blocks;
    req.parent_cell = sel.parent_cell;
    req.target_cell = sel.target_cell;
    for (const proto::Program& insp : sel.inspirations) {
      proto::Inspiration i;
      i.cand = candidate_of(c, insp, insp.iteration_found);
      i.eval_log = insp.eval.eval_log;
      i.combined_score = insp.eval.combined_score;
      i.cell = archive->cell_of(insp);
      req.inspirations.push_back(std::move(i));
    }
    if (c.proposer == kLlmProposer) {
      KILN_ASSIGN_OR_RETURN(req.strategy, fittest_prompt(c.id));
      req.evolve_prompt = options.prompt_evolution_interval > 0 && index % options.prompt_evolution_interval == 0;
    }
    fx.next.push_back(follow_up(proposal_service_for(c.proposer), pid + ":propose", proto::encode(req)));

    ++c.proposed;
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare("UPDATE campaigns SET proposed = ? WHERE id = ?"));
    st.bind(1, c.proposed).bind(2, c.id);
    return st.run();
  }

  // Keeps max_in_flight candidates moving until the budget is spent.
  Status top_up(CampaignRow& c, Effects& fx) {
    if (c.state != kRunning) return Status::ok();
    KILN_ASSIGN_OR_RETURN(int64_t in_flight, pending_programs(c.id));
    while (c.proposing() && in_flight < c.max_in_flight) {
      KILN_RETURN_IF_ERROR(issue_proposal(c, fx));
      ++in_flight;
    }
    return Status::ok();
  }

  // ----------------------------------------------------------------------------- campaign.start

  Status handle_start(std::string_view payload, Effects& fx) {
    auto msg = proto::decode<proto::CampaignStart>(payload);
    if (!msg.is_ok()) return invalid_argument("campaign.start: " + msg.status().message());
    const proto::CampaignStart& start = *msg;
    fx.campaign_id = start.campaign_id;
    if (start.campaign_id.empty() || start.campaign_id.find(kConfirmSuffix) != std::string::npos)
      return invalid_argument("campaign.start: bad campaign id '" + start.campaign_id + "'");
    if (start.budget < 0) return invalid_argument("campaign " + start.campaign_id + ": negative budget");

    KILN_ASSIGN_OR_RETURN(auto existing, load_campaign(start.campaign_id));
    if (existing) {
      // The same campaign submitted again under another job id: it is already running or done.
      fx.duplicate = true;
      return Status::ok();
    }
    auto spec = task::parse_task(start.files);
    if (!spec.is_ok()) return spec.status().with_context("campaign " + start.campaign_id);

    CampaignRow c;
    c.id = start.campaign_id;
    c.task_id = start.task_id.empty() ? task::task_id(start.files) : start.task_id;
    c.task_name = start.task_name.empty() ? spec->name : start.task_name;
    c.backend = spec->backend;
    c.op = spec->op;
    c.dtype = spec->dtype;
    c.files = start.files;
    c.budget = start.budget;
    c.proposer = start.proposer.empty() ? "tuner" : start.proposer;
    c.max_in_flight = start.max_in_flight > 0 ? start.max_in_flight : options.default_max_in_flight;
    c.state = std::string(kRunning);
    c.submitted_at = start.submitted_at;
    c.started_at = wall_time_s();
    c.target_speedup = start.target_speedup == 0 ? options.target_speedup : std::max(start.target_speedup, 0.0);
    c.patience = start.patience == 0 ? options.patience : std::max<int64_t>(start.patience, 0);
    KILN_ASSIGN_OR_RETURN(auto ins, db.prepare(
        "INSERT INTO campaigns(id, task_id, task_name, backend, op, dtype, files, budget, proposer, max_in_flight,"
        " state, submitted_at, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
    ins.bind(1, c.id).bind(2, c.task_id).bind(3, c.task_name).bind(4, c.backend).bind(5, c.op).bind(6, c.dtype);
    ins.bind_blob(7, proto::encode(FilesBlob{c.files})).bind(8, c.budget).bind(9, c.proposer);
    ins.bind(10, c.max_in_flight).bind(11, c.state).bind(12, c.submitted_at).bind(13, c.started_at);
    KILN_RETURN_IF_ERROR(ins.run());
    KILN_RETURN_IF_ERROR(save_control(c));

    // Program 0: the task's kernel as is, with the first value of every template parameter.
    proto::Program p0;
    p0.id = program_id_for(c.id, 0);
    p0.code = c.files.at(spec->kernel_file).data;
    p0.is_program0 = true;
    p0.language = c.backend == "cuda" ? "cuda" : "cpp";
    for (const auto& [name, values] : spec->params) p0.template_parameters[name] = values.front();
    p0.is_templated = !spec->params.empty();
    p0.task = task_ref(c);
    p0.metadata["proposer"] = std::string(kProgram0Proposer);
    p0.metadata["campaign_id"] = c.id;
    KILN_RETURN_IF_ERROR(insert_program(c, p0, 0, kProgram0Proposer));

    proto::CompileRequest compile;
    compile.cand = candidate_of(c, p0, 0);
    compile.backend = c.backend;
    compile.arch = arch_for(c.backend);
    compile.files = c.files;
    fx.next.push_back(follow_up(proto::svc::kCompile, p0.id + ":compile", proto::encode(compile)));

    // Proposals start at once, beside program 0, so the first wave does not wait for its score.
    while (c.proposing() && c.proposed < c.max_in_flight) KILN_RETURN_IF_ERROR(issue_proposal(c, fx));

    KILN_ASSIGN_OR_RETURN(proto::CampaignInfo info, campaign_info(c));
    fx.payload = proto::encode(info);
    return Status::ok();
  }

  // ----------------------------------------------------------------------------- results

  // The compiler accepts a proposal's code against the task kernel its compile request carried, which an
  // external bridge writes itself; the campaign's own copy is the one Kiln trusts. A result whose code
  // changed anything outside the editable regions becomes a proposal without code (perf_score 0).
  static void keep_to_regions(const CampaignRow& c, proto::ScoreResult& r) {
    if (r.stage == "propose" || r.cand.code.empty()) return;
    auto spec = task::parse_task(c.files);
    if (!spec.is_ok()) return;  // stored at the campaign's start, after the same validation
    Status st = task::check_regions_only(c.files.at(spec->kernel_file).data, r.cand.code);
    if (st.is_ok()) return;
    r.stage = "propose";
    r.error = st.message();
    r.build = {};
    r.test = {};
  }

  // The program a result is about (its id without the confirmation suffix) and its campaign.
  struct Subject {
    std::string pid;
    bool confirm = false;  // a confirming measurement, not the program's own evaluation
    CampaignRow campaign;
    ProgramRow program;
  };

  Result<Subject> subject_of(const proto::ScoreResult& r, Effects& fx) {
    const std::string& raw_id = r.cand.program_id;
    Subject s;
    const bool suffixed = ends_with(raw_id, kConfirmSuffix);
    s.pid = suffixed ? strip_confirm(raw_id) : raw_id;
    s.confirm = suffixed || r.purpose == kConfirm;
    const std::string cid = campaign_of(s.pid);
    fx.campaign_id = cid;
    if (!r.cand.campaign_id.empty() && r.cand.campaign_id != cid)
      return invalid_argument("result for " + raw_id + " names campaign '" + r.cand.campaign_id + "'");
    KILN_ASSIGN_OR_RETURN(auto camp, load_campaign(cid));
    if (!camp) return not_found("result for " + raw_id + ": unknown campaign '" + cid + "'");
    KILN_ASSIGN_OR_RETURN(auto row, load_program(s.pid));
    if (!row) return not_found("result for unknown program " + s.pid);
    s.campaign = std::move(*camp);
    s.program = std::move(*row);
    return s;
  }

  Status handle_result(std::string_view job_id, proto::ScoreResult r, Effects& fx) {
    KILN_ASSIGN_OR_RETURN(Subject subject, subject_of(r, fx));
    const std::string& pid = subject.pid;
    const std::string& cid = subject.campaign.id;
    CampaignRow& c = subject.campaign;
    ProgramRow& row = subject.program;
    if (subject.confirm) return handle_confirmation(job_id, c, pid, r, fx);

    if (row.state == kScored) return count_duplicate(c, fx);
    keep_to_regions(c, r);
    KILN_ASSIGN_OR_RETURN(bool fresh, insert_result(pid, kEval, cid, job_id, r));
    if (!fresh) return count_duplicate(c, fx);

    proto::Program p = std::move(row.record);
    const proto::Candidate& cand = r.cand;
    if (!cand.code.empty()) p.code = cand.code;
    if (!cand.params.empty()) p.template_parameters = cand.params;
    p.is_templated = !p.template_parameters.empty();
    if (!cand.proposer.empty()) p.metadata["proposer"] = cand.proposer;
    if (!cand.notes.empty()) p.metadata["notes"] = cand.notes;
    p.metadata["stage"] = r.stage;
    // What the proposer reports (model, prompt lineage, tokens); the strategy text goes to the prompts table.
    std::string prompt_text;
    for (const auto& [key, value] : cand.metadata) {
      if (key == "prompt_text") prompt_text = value;
      else if (key != "island" && key != "campaign_id" && key != "proposer") p.metadata[key] = value;
    }
    if (!r.test.worker.device_name.empty()) p.metadata["device"] = r.test.worker.device_name;
    if (!r.build.kernel_sha256.empty()) p.metadata["kernel_sha256"] = r.build.kernel_sha256;
    if (!cand.raw_llm_code.empty()) p.raw_llm_code = truncate_utf8(cand.raw_llm_code, proto::kMaxRawLlmCodeBytes);
    p.task = task_ref(c);
    p.eval = evaluate(r);
    p.feedback = p.eval.eval_log;
    p.timestamp = wall_time_s();
    p.metrics["perf_score"] = static_cast<double>(p.eval.perf_score);
    p.metrics["combined_score"] = p.eval.combined_score;
    if (p.eval.runtime_improvement > 0) p.metrics["speedup"] = p.eval.runtime_improvement;
    KILN_ASSIGN_OR_RETURN(Archive * archive, archive_for(cid));
    if (std::string cell = archive->cell_of(p); !cell.empty()) p.metadata["cell"] = cell;
    // Against the archive as it stands before this program joins it: how new its behaviour is.
    p.complexity = static_cast<double>(code_lines(p.code));
    p.diversity = archive->diversity_of(p);
    KILN_RETURN_IF_ERROR(store_scored_program(c, p));
    const int64_t prompt_tokens = to_count(p.metadata, "prompt_tokens");
    const int64_t completion_tokens = to_count(p.metadata, "completion_tokens");
    if (prompt_tokens > 0 || completion_tokens > 0) {
      c.prompt_tokens += prompt_tokens;
      c.completion_tokens += completion_tokens;
      KILN_RETURN_IF_ERROR(save_control(c));
    }
    KILN_RETURN_IF_ERROR(credit_prompt(cid, p, prompt_text));

    archive->add(p);
    std::optional<proto::Program> best = archive->best();
    if (best && best->id != c.best_program_id) {
      c.best_program_id = best->id;
      KILN_ASSIGN_OR_RETURN(auto st, db.prepare("UPDATE campaigns SET best_program_id = ? WHERE id = ?"));
      st.bind(1, c.best_program_id).bind(2, c.id);
      KILN_RETURN_IF_ERROR(st.run());
    }
    if (best && best->id == pid && speedup_shortfall(r, options.min_speedup).empty())
      KILN_RETURN_IF_ERROR(request_confirmation(c, p, row.proposal_index, fx));
    KILN_RETURN_IF_ERROR(check_early_stop(c, best));

    KILN_RETURN_IF_ERROR(top_up(c, fx));
    return maybe_finish(c);
  }

  // The best so far clears the bar once: measure it again in an independent test job before promoting.
  Status request_confirmation(CampaignRow& c, const proto::Program& p, int64_t proposal_index, Effects& fx) {
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare(
        "INSERT OR IGNORE INTO promotions(program_id, campaign_id, state, requested_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?)"));
    double now = wall_time_s();
    st.bind(1, p.id).bind(2, c.id).bind(3, promo::kConfirming).bind(4, now).bind(5, now);
    KILN_RETURN_IF_ERROR(st.run());
    if (db.changes() == 0) return Status::ok();

    proto::CompileRequest compile;
    compile.cand = candidate_of(c, p, proposal_index);
    compile.cand.program_id = p.id + std::string(kConfirmSuffix);
    compile.backend = c.backend;
    compile.arch = arch_for(c.backend);
    compile.files = c.files;
    // Measured again by another tester (another GPU) than the first time, when one is connected.
    KILN_ASSIGN_OR_RETURN(auto eval, load_result(p.id, kEval));
    if (eval) compile.avoid_tester = eval->test.worker.worker_id;
    fx.next.push_back(follow_up(proto::svc::kCompile, p.id + ":compile-confirm", proto::encode(compile)));
    return Status::ok();
  }

  Status handle_confirmation(std::string_view job_id, CampaignRow& c, const std::string& pid,
                             const proto::ScoreResult& r, Effects& fx) {
    KILN_ASSIGN_OR_RETURN(auto state, promotion_state(pid));
    if (!state || *state != promo::kConfirming) return count_duplicate(c, fx);
    KILN_ASSIGN_OR_RETURN(bool fresh, insert_result(pid, kConfirm, c.id, job_id, r));
    if (!fresh) return count_duplicate(c, fx);

    std::string shortfall = speedup_shortfall(r, options.min_speedup);
    if (!shortfall.empty()) {
      KILN_RETURN_IF_ERROR(set_promotion(pid, promo::kNotConfirmed, "", "not confirmed: " + shortfall));
      return maybe_finish(c);
    }
    KILN_ASSIGN_OR_RETURN(auto eval, load_result(pid, kEval));
    KILN_ASSIGN_OR_RETURN(auto row, load_program(pid));
    if (!eval || !row) return internal_error("confirmation of " + pid + ": its eval result is missing");

    KILN_ASSIGN_OR_RETURN(proto::PromoteRequest req, promote_request(c, row->record, *eval, r));
    KILN_RETURN_IF_ERROR(set_promotion(pid, promo::kPromoting, "", ""));
    fx.next.push_back(follow_up(proto::svc::kPromote, pid + ":promote", proto::encode(req)));
    return Status::ok();
  }

  Result<proto::PromoteRequest> promote_request(const CampaignRow& c, const proto::Program& p,
                                                const proto::ScoreResult& eval, const proto::ScoreResult& confirm) {
    proto::PromoteRequest req;
    req.campaign_id = c.id;
    req.program_id = p.id;
    req.task_name = c.task_name;
    req.op = c.op;
    req.backend = c.backend;
    req.dtype = c.dtype;
    if (auto spec = task::parse_task(c.files); spec.is_ok()) {
      req.op = spec->op;
      req.dtype = spec->dtype;
      if (!spec->benchmark_cases.empty()) req.shape = spec->benchmark_cases.front();
    }
    req.source = p.code;
    req.source_ext = c.backend == "cuda" ? "cu" : "cpp";
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

  Status handle_promoted(std::string_view payload, Effects& fx) {
    auto msg = proto::decode<proto::PromoteOutcome>(payload);
    if (!msg.is_ok()) return invalid_argument("promoted: " + msg.status().message());
    const std::string cid = msg->campaign_id.empty() ? campaign_of(msg->program_id) : msg->campaign_id;
    fx.campaign_id = cid;
    KILN_ASSIGN_OR_RETURN(auto camp, load_campaign(cid));
    if (!camp) return not_found("promotion outcome for unknown campaign '" + cid + "'");
    KILN_ASSIGN_OR_RETURN(auto state, promotion_state(msg->program_id));
    if (!state || *state != promo::kPromoting) return count_duplicate(*camp, fx);
    if (msg->promoted)
      KILN_RETURN_IF_ERROR(set_promotion(msg->program_id, promo::kPromoted, msg->kernel_id, "promoted as " + msg->kernel_id));
    else
      KILN_RETURN_IF_ERROR(set_promotion(msg->program_id, promo::kRefused, "", "refused: " + msg->reason));
    return maybe_finish(*camp);
  }

  // ----------------------------------------------------------------------------- dead letters

  // A job that killed every worker it met still ends its candidate, so the campaign never stalls. One that
  // workers kept giving back, naming a fault of their own side (the reference does not build, the evaluator
  // cannot run the task), ends it too, but not evaluated: that fault is never scored against it.
  Status handle_dead(std::string_view job_id, std::string_view payload, Effects& fx) {
    auto msg = proto::decode<proto::DeadLetter>(payload);
    if (!msg.is_ok()) return invalid_argument("dead letter: " + msg.status().message());
    const proto::DeadLetter& dead = *msg;
    const std::string cause = (dead.reason.empty() ? std::string("no reason given") : dead.reason) +
                              " (dead after " + std::to_string(dead.attempts) + " attempts)";
    const std::string why = (dead.worker_retry ? "not evaluated: " : "crashed: ") + cause;
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
      r.stage = "propose";
      r.error = why;
    } else if (dead.service == proto::svc::kCompile) {
      auto req = proto::decode<proto::CompileRequest>(body);
      if (!req.is_ok()) return invalid_argument("dead compile job: " + req.status().message());
      r.cand = req->cand;
      r.stage = "compile";
      r.error = why;
    } else if (dead.service.rfind("test.", 0) == 0) {
      auto req = proto::decode<proto::TestRequest>(body);
      if (!req.is_ok()) return invalid_argument("dead test job: " + req.status().message());
      r.cand = req->cand;
      r.purpose = req->purpose;
      r.stage = "test";
      r.build = req->build;
      r.test.status = std::string(proto::test_status::kCrashed);
      r.test.message = why;
    } else if (dead.service == proto::svc::kPromote) {
      auto req = proto::decode<proto::PromoteRequest>(body);
      if (!req.is_ok()) return invalid_argument("dead promote job: " + req.status().message());
      fx.campaign_id = req->campaign_id;
      KILN_ASSIGN_OR_RETURN(auto camp, load_campaign(req->campaign_id));
      if (!camp) return not_found("dead promote job for unknown campaign '" + req->campaign_id + "'");
      KILN_ASSIGN_OR_RETURN(auto state, promotion_state(req->program_id));
      if (!state || *state != promo::kPromoting) return count_duplicate(*camp, fx);
      const std::string note = "promotion failed: " + (dead.worker_retry ? cause : why);
      KILN_RETURN_IF_ERROR(set_promotion(req->program_id, promo::kFailed, "", note));
      return maybe_finish(*camp);
    } else if (dead.service == proto::svc::kScore) {
      // A result that could not be scored: its candidate still ends, as "no result".
      auto kind = proto::peek_string(body, "kind");
      if (!kind.is_ok() || *kind != proto::kind::kResult)
        return invalid_argument("dead score job " + dead.job_id + " carried no result");
      auto req = proto::decode<proto::ScoreResult>(body);
      if (!req.is_ok()) return invalid_argument("dead score job: " + req.status().message());
      r.cand = req->cand;
      r.purpose = req->purpose;
      r.stage = "test";
      r.test.status = std::string(proto::test_status::kCrashed);
      r.test.message = "scoring " + why;
    } else {
      return invalid_argument("dead letter from unknown service '" + dead.service + "'");
    }
    if (dead.worker_retry) return handle_not_evaluated(r, why, fx);
    return handle_result(job_id, std::move(r), fx);
  }

  // Ends a candidate without a score: recorded with `why`, kept out of the archive (never a parent), and
  // its place in flight given to the next proposal. A confirming measurement that could not be made leaves
  // the program's own score standing, unconfirmed.
  Status handle_not_evaluated(const proto::ScoreResult& r, const std::string& why, Effects& fx) {
    KILN_ASSIGN_OR_RETURN(Subject subject, subject_of(r, fx));
    CampaignRow& c = subject.campaign;
    if (subject.confirm) {
      KILN_ASSIGN_OR_RETURN(auto state, promotion_state(subject.pid));
      if (!state || *state != promo::kConfirming) return count_duplicate(c, fx);
      KILN_RETURN_IF_ERROR(set_promotion(subject.pid, promo::kNotConfirmed, "", "not confirmed: " + why));
      return maybe_finish(c);
    }
    if (subject.program.state != kPending) return count_duplicate(c, fx);

    proto::Program p = std::move(subject.program.record);
    p.metadata["stage"] = r.stage;
    p.eval.status = std::string(kNotEvaluated);
    p.eval.eval_log = truncate_utf8(why, kMaxEvalLogBytes);
    p.feedback = p.eval.eval_log;
    p.timestamp = wall_time_s();
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare(
        "UPDATE programs SET state = ?, status = ?, eval_log = ?, record = ? WHERE id = ?"));
    st.bind(1, kNotEvaluated).bind(2, kNotEvaluated).bind(3, p.eval.eval_log).bind_blob(4, proto::encode(p));
    st.bind(5, subject.pid);
    KILN_RETURN_IF_ERROR(st.run());
    KILN_RETURN_IF_ERROR(top_up(c, fx));
    return maybe_finish(c);
  }

  // ----------------------------------------------------------------------------- queries

  Result<proto::CampaignInfo> campaign_info(const CampaignRow& c) {
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
    KILN_ASSIGN_OR_RETURN(info.prompts, count("SELECT COUNT(*) FROM prompts WHERE campaign_id = ?", c.id));
    KILN_ASSIGN_OR_RETURN(Archive * archive, archive_for(c.id));
    info.cells_filled = static_cast<int64_t>(archive->cells_filled());
    KILN_ASSIGN_OR_RETURN(info.scored,
                          count("SELECT COUNT(*) FROM programs WHERE campaign_id = ? AND state = 'scored'", c.id));
    KILN_ASSIGN_OR_RETURN(info.correct, count("SELECT COUNT(*) FROM programs WHERE campaign_id = ?"
                                              " AND state = 'scored' AND correct = 1", c.id));
    KILN_ASSIGN_OR_RETURN(info.in_flight, pending_programs(c.id));
    KILN_ASSIGN_OR_RETURN(info.not_evaluated, count("SELECT COUNT(*) FROM programs WHERE campaign_id = ?"
                                                    " AND state = 'not_evaluated'", c.id));
    info.best_program_id = c.best_program_id;
    if (!c.best_program_id.empty()) {
      KILN_ASSIGN_OR_RETURN(auto best, load_program(c.best_program_id));
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
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare(
        "SELECT program_id, state, kernel_id, note FROM promotions WHERE campaign_id = ? ORDER BY rowid"));
    st.bind(1, c.id);
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool row, st.step());
      if (!row) break;
      std::string program = st.column_text(0), state = st.column_text(1), note = st.column_text(3);
      if (state == promo::kPromoted) info.promoted.push_back(st.column_text(2));
      info.promotion_notes.push_back(program + ": " + (note.empty() ? state : note));
    }
    return info;
  }

  Result<std::vector<std::string>> campaign_ids() {
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare("SELECT id FROM campaigns ORDER BY started_at, id"));
    std::vector<std::string> ids;
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool row, st.step());
      if (!row) break;
      ids.push_back(st.column_text(0));
    }
    return ids;
  }

  // EvalResult.template_results: every parameter set the campaign tried with this code and the best
  // combined score each got, the kMaxTemplateResults best kept. Read when asked for, so it is complete.
  Result<std::map<std::string, double>> template_results(const std::string& cid, const std::string& code) {
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare(
        "SELECT record FROM programs WHERE campaign_id = ? AND state = 'scored' AND code = ?"));
    st.bind(1, cid).bind(2, code);
    std::map<std::string, double> tried;
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool row, st.step());
      if (!row) break;
      auto rec = proto::decode<proto::Program>(st.column_blob(0));
      if (!rec.is_ok()) return internal_error("campaign " + cid + ": stored program: " + rec.status().message());
      const std::string key = params_string(rec->template_parameters);
      auto [it, fresh] = tried.emplace(key, rec->eval.combined_score);
      if (!fresh) it->second = std::max(it->second, rec->eval.combined_score);
    }
    if (tried.size() > proto::kMaxTemplateResults) {
      std::vector<std::pair<double, std::string>> ranked;
      for (const auto& [key, score] : tried) ranked.emplace_back(-score, key);
      std::sort(ranked.begin(), ranked.end());
      tried.clear();
      for (size_t i = 0; i < proto::kMaxTemplateResults; ++i) tried.emplace(ranked[i].second, -ranked[i].first);
    }
    return tried;
  }

  Result<proto::BestPrograms> best_programs(const CampaignRow& c, int64_t top) {
    proto::BestPrograms out;
    KILN_ASSIGN_OR_RETURN(out.campaign, campaign_info(c));
    // Lineage needs every program's parent, not only the top ones.
    std::map<std::string, std::string> parent_of;
    {
      KILN_ASSIGN_OR_RETURN(auto st, db.prepare("SELECT id, parent_id FROM programs WHERE campaign_id = ?"));
      st.bind(1, c.id);
      while (true) {
        KILN_ASSIGN_OR_RETURN(bool row, st.step());
        if (!row) break;
        parent_of[st.column_text(0)] = st.column_text(1);
      }
    }
    std::map<std::string, std::string> prompt_parent;
    {
      KILN_ASSIGN_OR_RETURN(auto ps, db.prepare("SELECT id, parent_id FROM prompts WHERE campaign_id = ?"));
      ps.bind(1, c.id);
      while (true) {
        KILN_ASSIGN_OR_RETURN(bool row, ps.step());
        if (!row) break;
        prompt_parent[ps.column_text(0)] = ps.column_text(1);
      }
    }
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare(
        "SELECT record FROM programs WHERE campaign_id = ? AND state = 'scored'"
        " ORDER BY combined_score DESC, scored_seq LIMIT ?"));
    st.bind(1, c.id).bind(2, top > 0 ? top : int64_t{5});
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool row, st.step());
      if (!row) break;
      auto rec = proto::decode<proto::Program>(st.column_blob(0));
      if (!rec.is_ok()) return internal_error("campaign " + c.id + ": stored program: " + rec.status().message());
      proto::Program p = std::move(rec).value();
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

  // ----------------------------------------------------------------------------- one job

  Result<std::optional<proto::ResultMsg>> processed(std::string_view job_id) {
    KILN_ASSIGN_OR_RETURN(auto st, db.prepare("SELECT result FROM processed_jobs WHERE job_id = ?"));
    st.bind(1, job_id);
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) return std::optional<proto::ResultMsg>{};
    auto msg = proto::decode<proto::ResultMsg>(st.column_blob(0));
    if (!msg.is_ok()) return internal_error("processed job " + std::string(job_id) + ": " + msg.status().message());
    return std::optional<proto::ResultMsg>(std::move(msg).value());
  }

  Status dispatch(std::string_view kind, std::string_view job_id, std::string_view payload, Effects& fx) {
    if (kind == proto::kind::kCampaignStart) return handle_start(payload, fx);
    if (kind == proto::kind::kResult) {
      auto r = proto::decode<proto::ScoreResult>(payload);
      if (!r.is_ok()) return invalid_argument("result: " + r.status().message());
      return handle_result(job_id, std::move(r).value(), fx);
    }
    if (kind == proto::kind::kDead) return handle_dead(job_id, payload, fx);
    if (kind == proto::kind::kPromoted) return handle_promoted(payload, fx);
    return invalid_argument("unknown payload kind '" + std::string(kind) + "'");
  }

  // The job's state change and its answer, committed together or not at all.
  Status apply(std::string_view job_id, std::string_view kind, std::string_view payload, proto::ResultMsg& result,
               Effects& fx) {
    store::Transaction tx(db);
    KILN_RETURN_IF_ERROR(tx.begin_status());
    KILN_RETURN_IF_ERROR(dispatch(kind, job_id, payload, fx));
    result.outcome = std::string(proto::outcome::kOk);
    result.payload.data = std::move(fx.payload);
    result.next = std::move(fx.next);
    KILN_ASSIGN_OR_RETURN(auto put, db.prepare(
        "INSERT INTO processed_jobs(job_id, kind, campaign_id, result, processed_at) VALUES (?, ?, ?, ?, ?)"));
    put.bind(1, job_id).bind(2, kind).bind(3, fx.campaign_id).bind_blob(4, proto::encode(result));
    put.bind(5, wall_time_s());
    KILN_RETURN_IF_ERROR(put.run());
    return tx.commit();
  }

  Result<Handled> handle_job(std::string_view job_id, std::string_view payload) {
    Handled out;
    out.result.job_id = std::string(job_id);
    KILN_ASSIGN_OR_RETURN(auto prior, processed(job_id));
    if (prior) {
      out.result = std::move(*prior);
      out.replayed = true;
      return out;
    }
    auto kind = proto::peek_string(payload, "kind");
    if (!kind.is_ok()) {
      out.result.outcome = std::string(proto::outcome::kFailed);
      out.result.error = "score job " + std::string(job_id) + ": " + kind.status().message();
      return out;
    }

    Effects fx;
    Status st = apply(job_id, *kind, payload, out.result, fx);
    if (!st.is_ok()) {
      archives.clear();  // the transaction rolled back; so must the in-memory view
      if (!is_rejection(st)) return st;
      // Bad input changes nothing, so the same job gets the same answer again without being stored.
      out.result.outcome = std::string(proto::outcome::kFailed);
      out.result.error = st.message();
      out.result.next.clear();
      out.result.payload.data.clear();
      return out;
    }
    out.duplicate = fx.duplicate;
    return out;
  }
};

// --------------------------------------------------------------------------------- CampaignEngine

CampaignEngine::CampaignEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CampaignEngine::~CampaignEngine() = default;

Result<std::unique_ptr<CampaignEngine>> CampaignEngine::open(const std::string& db_path, EngineOptions options) {
  auto db = store::Database::open(db_path);
  if (!db.is_ok()) return db.status().with_context("archive " + db_path);
  Status st = detail::ensure_schema(*db);
  if (!st.is_ok()) return st.with_context("archive " + db_path);
  if (options.elites.capacity == 0) options.elites.capacity = 1;
  return std::unique_ptr<CampaignEngine>(
      new CampaignEngine(std::make_unique<Impl>(std::move(db).value(), std::move(options))));
}

Result<Handled> CampaignEngine::handle_job(std::string_view job_id, std::string_view payload) {
  std::lock_guard lock(impl_->mu);
  return impl_->handle_job(job_id, payload);
}

Result<proto::CampaignList> CampaignEngine::campaigns(const proto::CampaignQuery& query) {
  std::lock_guard lock(impl_->mu);
  proto::CampaignList list;
  std::vector<std::string> ids;
  if (!query.campaign_id.empty()) {
    ids.push_back(query.campaign_id);
  } else {
    KILN_ASSIGN_OR_RETURN(ids, impl_->campaign_ids());
  }
  for (const auto& id : ids) {
    KILN_ASSIGN_OR_RETURN(auto row, impl_->load_campaign(id));
    if (!row) continue;
    KILN_ASSIGN_OR_RETURN(proto::CampaignInfo info, impl_->campaign_info(*row));
    list.campaigns.push_back(std::move(info));
  }
  return list;
}

Result<proto::CampaignInfo> CampaignEngine::campaign(const std::string& campaign_id) {
  std::lock_guard lock(impl_->mu);
  KILN_ASSIGN_OR_RETURN(auto row, impl_->load_campaign(campaign_id));
  if (!row) return not_found("unknown campaign '" + campaign_id + "'");
  return impl_->campaign_info(*row);
}

Result<proto::BestPrograms> CampaignEngine::best(const proto::CampaignQuery& query) {
  std::lock_guard lock(impl_->mu);
  KILN_ASSIGN_OR_RETURN(auto row, impl_->load_campaign(query.campaign_id));
  if (!row) return not_found("unknown campaign '" + query.campaign_id + "'");
  return impl_->best_programs(*row, query.top);
}

Result<std::map<std::string, double>> CampaignEngine::best_speedup_by_task() {
  std::lock_guard lock(impl_->mu);
  KILN_ASSIGN_OR_RETURN(auto st, impl_->db.prepare(
      "SELECT c.task_name, MAX(p.runtime_improvement) FROM campaigns c JOIN programs p ON p.id = c.best_program_id"
      " WHERE p.correct = 1 AND p.runtime_improvement > 0 GROUP BY c.task_name"));
  std::map<std::string, double> out;
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) break;
    out[st.column_text(0)] = st.column_double(1);
  }
  return out;
}

Result<int64_t> CampaignEngine::duplicates_ignored() {
  std::lock_guard lock(impl_->mu);
  KILN_ASSIGN_OR_RETURN(auto st, impl_->db.prepare("SELECT COALESCE(SUM(duplicates), 0) FROM campaigns"));
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  return row ? st.column_int(0) : int64_t{0};
}

}  // namespace kiln::scorer
