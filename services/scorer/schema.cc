#include "schema.h"

#include <string>

namespace kiln::scorer::detail {

namespace {

// Columns that queries filter or sort on are real columns; the full KernelFoundry records (Program with
// its EvalResult, the raw ScoreResult) are kept as msgpack blobs beside them so nothing is lost.
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS campaigns (
  id              TEXT PRIMARY KEY,
  task_id         TEXT NOT NULL,
  task_name       TEXT NOT NULL,
  backend         TEXT NOT NULL,
  op              TEXT NOT NULL,
  dtype           TEXT NOT NULL,
  files           BLOB NOT NULL,              -- msgpack {"files": FileMap}: the normalized package
  budget          INTEGER NOT NULL,           -- proposals after program 0
  proposer        TEXT NOT NULL,
  max_in_flight   INTEGER NOT NULL,
  proposed        INTEGER NOT NULL DEFAULT 0, -- proposals issued
  scored          INTEGER NOT NULL DEFAULT 0, -- programs with a final eval score
  duplicates      INTEGER NOT NULL DEFAULT 0, -- repeated results ignored
  state           TEXT NOT NULL,              -- running | done
  best_program_id TEXT NOT NULL DEFAULT '',
  submitted_at    REAL NOT NULL DEFAULT 0,
  started_at      REAL NOT NULL,
  finished_at     REAL NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS programs (
  id                  TEXT PRIMARY KEY,
  campaign_id         TEXT NOT NULL REFERENCES campaigns(id),
  proposal_index      INTEGER NOT NULL,
  parent_id           TEXT NOT NULL,
  generation          INTEGER NOT NULL,
  proposer            TEXT NOT NULL,
  state               TEXT NOT NULL,           -- pending | scored | not_evaluated (dead by faults not its own)
  scored_seq          INTEGER NOT NULL DEFAULT 0,
  code                TEXT NOT NULL,
  params              TEXT NOT NULL,           -- JSON object of the template parameters
  perf_score          INTEGER NOT NULL DEFAULT -1,
  combined_score      REAL NOT NULL DEFAULT 0,
  correct             INTEGER NOT NULL DEFAULT 0,
  runtime_ms          REAL NOT NULL DEFAULT -1,
  runtime_improvement REAL NOT NULL DEFAULT -1,
  status              TEXT NOT NULL DEFAULT '',
  eval_log            TEXT NOT NULL DEFAULT '',
  record              BLOB NOT NULL,           -- msgpack proto::Program (with its EvalResult)
  created_at          REAL NOT NULL,
  scored_at           REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS programs_by_campaign ON programs(campaign_id, state);
CREATE INDEX IF NOT EXISTS programs_by_score ON programs(campaign_id, combined_score DESC, scored_seq);
CREATE TABLE IF NOT EXISTS results (
  program_id  TEXT NOT NULL,
  purpose     TEXT NOT NULL,                   -- eval | confirm
  campaign_id TEXT NOT NULL,
  job_id      TEXT NOT NULL,
  payload     BLOB NOT NULL,                   -- msgpack proto::ScoreResult as received (or synthesized)
  received_at REAL NOT NULL,
  PRIMARY KEY (program_id, purpose)
);
CREATE TABLE IF NOT EXISTS promotions (
  program_id   TEXT PRIMARY KEY,
  campaign_id  TEXT NOT NULL,
  state        TEXT NOT NULL,  -- confirming | promoting | promoted | refused | not_confirmed | failed
  kernel_id    TEXT NOT NULL DEFAULT '',
  note         TEXT NOT NULL DEFAULT '',
  requested_at REAL NOT NULL,
  updated_at   REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS promotions_by_campaign ON promotions(campaign_id, state);
-- Version 2: campaign control (early stop, token usage) and the strategy sections (meta-prompts).
-- New tables rather than new columns, so a version-1 archive gains them without a rewrite.
CREATE TABLE IF NOT EXISTS campaign_control (
  campaign_id       TEXT PRIMARY KEY,
  target_speedup    REAL NOT NULL DEFAULT 0,     -- stop once the best correct speedup reaches it; 0 = off
  patience          INTEGER NOT NULL DEFAULT 0,  -- stop after this many scored proposals without a new best
  stop_reason       TEXT NOT NULL DEFAULT '',
  prompt_tokens     INTEGER NOT NULL DEFAULT 0,
  completion_tokens INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS prompts (
  campaign_id TEXT NOT NULL,
  id          TEXT NOT NULL,
  parent_id   TEXT NOT NULL,
  text        TEXT NOT NULL,
  fitness     REAL NOT NULL DEFAULT 0,           -- best combined score of the programs it produced
  uses        INTEGER NOT NULL DEFAULT 0,
  history     BLOB NOT NULL,                     -- msgpack {"scores": [...]}: its programs' scores, last 32
  seq         INTEGER NOT NULL,                  -- order of first appearance
  PRIMARY KEY (campaign_id, id)
);
-- What an ended campaign's archive looked like, so a query about it need not rebuild the archive (a table
-- of its own, so older archives gain it without a rewrite and older scorers ignore it).
CREATE TABLE IF NOT EXISTS campaign_summary (
  campaign_id  TEXT PRIMARY KEY,
  cells_filled INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS processed_jobs (
  job_id       TEXT PRIMARY KEY,
  kind         TEXT NOT NULL,
  campaign_id  TEXT NOT NULL,
  result       BLOB NOT NULL,                  -- msgpack proto::ResultMsg: the answer given
  processed_at REAL NOT NULL
);
)sql";

}  // namespace

Status ensure_schema(store::Database& db) {
  KILN_RETURN_IF_ERROR(db.exec(kSchema));
  KILN_ASSIGN_OR_RETURN(auto get, db.prepare("SELECT value FROM meta WHERE key = 'schema_version'"));
  KILN_ASSIGN_OR_RETURN(bool has, get.step());
  if (has) {
    int64_t version = get.column_int(0);  // SQLite converts the text
    if (version > kSchemaVersion)
      return failed_precondition("archive schema version " + std::to_string(version) +
                                 " is newer than this scorer's (" + std::to_string(kSchemaVersion) + ")");
    if (version == kSchemaVersion) return Status::ok();
    // Older: the CREATE IF NOT EXISTS above added what it lacked.
    KILN_ASSIGN_OR_RETURN(auto bump, db.prepare("UPDATE meta SET value = ? WHERE key = 'schema_version'"));
    bump.bind(1, std::to_string(kSchemaVersion));
    return bump.run();
  }
  KILN_ASSIGN_OR_RETURN(auto put, db.prepare("INSERT INTO meta(key, value) VALUES ('schema_version', ?)"));
  put.bind(1, std::to_string(kSchemaVersion));
  return put.run();
}

}  // namespace kiln::scorer::detail
