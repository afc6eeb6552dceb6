#include "kiln/broker/job_table.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "kiln/core/time.h"

namespace kiln::broker {

std::string_view job_state_name(JobState s) {
  switch (s) {
    case JobState::kQueued: return "queued";
    case JobState::kLeased: return "leased";
    case JobState::kDone: return "done";
    case JobState::kFailed: return "failed";
    case JobState::kDead: return "dead";
  }
  return "unknown";
}

namespace {
JobState parse_state(const std::string& s) {
  if (s == "leased") return JobState::kLeased;
  if (s == "done") return JobState::kDone;
  if (s == "failed") return JobState::kFailed;
  if (s == "dead") return JobState::kDead;
  return JobState::kQueued;
}

constexpr std::string_view kSchema = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  id         TEXT PRIMARY KEY,
  service    TEXT NOT NULL,
  state      TEXT NOT NULL,
  attempt    INTEGER NOT NULL,
  payload    BLOB,           -- dropped when the job finishes
  result     BLOB,           -- the RESULT payload, kept small
  error      TEXT NOT NULL DEFAULT '',
  timeout_s  REAL NOT NULL DEFAULT 0,
  avoid_worker TEXT NOT NULL DEFAULT '',
  device     TEXT NOT NULL DEFAULT '',
  created_at REAL NOT NULL,
  updated_at REAL NOT NULL,
  priority   INTEGER NOT NULL DEFAULT 0,
  campaign   TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS jobs_active ON jobs(state) WHERE state IN ('queued', 'leased');
CREATE TABLE IF NOT EXISTS blobs (
  sha256     TEXT PRIMARY KEY,
  data       BLOB NOT NULL,
  created_at REAL NOT NULL
);
)sql";
// Made after the columns the migrations add exist.
constexpr std::string_view kEndedIndex =
    "CREATE INDEX IF NOT EXISTS jobs_ended ON jobs(updated_at) WHERE state IN ('done', 'failed', 'dead')";
constexpr std::string_view kEnded = "state IN ('done', 'failed', 'dead')";
// After a checkpoint the WAL file is cut back to this, rather than staying as large as its busiest moment.
constexpr int64_t kWalLimitBytes = 4 << 20;

Result<int64_t> pragma_int(store::Database& db, const std::string& sql) {
  KILN_ASSIGN_OR_RETURN(auto st, db.prepare(sql));
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  return row ? st.column_int(0) : 0;
}

// Tables made before a column existed gain it.
Status add_column_if_missing(store::Database& db, const std::string& column, const std::string& definition) {
  KILN_ASSIGN_OR_RETURN(int64_t n,
                        pragma_int(db, "SELECT COUNT(*) FROM pragma_table_info('jobs') WHERE name='" + column + "'"));
  if (n > 0) return Status::ok();
  return db.exec("ALTER TABLE jobs ADD COLUMN " + column + " " + definition);
}

// Freed pages go back to the file system only in auto_vacuum=INCREMENTAL mode, which a file takes when it
// is rewritten (VACUUM): switching to WAL has written the header of a new file already, so a new file is
// rewritten at once (empty: instant), and a file of an older broker once, here.
Status ensure_incremental_vacuum(store::Database& db, const std::string& path) {
  KILN_ASSIGN_OR_RETURN(int64_t mode, pragma_int(db, "PRAGMA auto_vacuum"));
  if (mode == 2) return Status::ok();
  KILN_ASSIGN_OR_RETURN(int64_t tables, pragma_int(db, "SELECT COUNT(*) FROM sqlite_master"));
  if (tables > 0) spdlog::info("job table {}: converting to incremental vacuum (once; the file is rewritten)", path);
  KILN_RETURN_IF_ERROR(db.exec("PRAGMA auto_vacuum = INCREMENTAL"));
  return db.exec("VACUUM").with_context("converting to incremental vacuum");
}

}  // namespace

Result<JobTable> JobTable::open(const std::string& path, int64_t max_bytes) {
  auto db = store::Database::open(path);
  if (!db.is_ok()) return db.status();
  KILN_RETURN_IF_ERROR(ensure_incremental_vacuum(*db, path));
  KILN_RETURN_IF_ERROR(db->exec("PRAGMA journal_size_limit = " + std::to_string(kWalLimitBytes)));
  KILN_RETURN_IF_ERROR(db->exec(kSchema));
  KILN_RETURN_IF_ERROR(add_column_if_missing(*db, "avoid_worker", "TEXT NOT NULL DEFAULT ''"));
  KILN_RETURN_IF_ERROR(add_column_if_missing(*db, "priority", "INTEGER NOT NULL DEFAULT 0"));
  KILN_RETURN_IF_ERROR(add_column_if_missing(*db, "campaign", "TEXT NOT NULL DEFAULT ''"));
  KILN_RETURN_IF_ERROR(add_column_if_missing(*db, "device", "TEXT NOT NULL DEFAULT ''"));
  KILN_RETURN_IF_ERROR(db->exec(kEndedIndex));
  if (max_bytes > 0) {
    KILN_ASSIGN_OR_RETURN(auto page, db->prepare("PRAGMA page_size"));
    KILN_ASSIGN_OR_RETURN(bool row, page.step());
    const int64_t page_bytes = row ? page.column_int(0) : 4096;
    const int64_t pages = std::max<int64_t>(1, max_bytes / std::max<int64_t>(page_bytes, 512));
    KILN_RETURN_IF_ERROR(db->exec("PRAGMA max_page_count = " + std::to_string(pages)));
  }
  return JobTable(std::move(db).value());
}

Result<std::vector<JobRow>> JobTable::load_active() {
  KILN_ASSIGN_OR_RETURN(
      auto st,
      db_.prepare("SELECT id, service, state, attempt, payload, timeout_s, created_at, avoid_worker, priority, "
                  "campaign, device FROM jobs WHERE state IN ('queued','leased') ORDER BY created_at, rowid"));
  std::vector<JobRow> rows;
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) break;
    JobRow r;
    r.id = st.column_text(0);
    r.service = st.column_text(1);
    r.state = parse_state(st.column_text(2));
    r.attempt = static_cast<int>(st.column_int(3));
    r.payload = st.column_blob(4);
    r.timeout_s = st.column_double(5);
    r.created_at = st.column_double(6);
    r.avoid_worker = st.column_text(7);
    r.priority = st.column_int(8);
    r.campaign = st.column_text(9);
    r.device = st.column_text(10);
    rows.push_back(std::move(r));
  }
  return rows;
}

Result<bool> JobTable::insert(const JobRow& row) {
  KILN_RETURN_IF_ERROR(check_write("insert"));
  KILN_ASSIGN_OR_RETURN(
      auto st,
      db_.prepare("INSERT OR IGNORE INTO jobs(id, service, state, attempt, payload, timeout_s, created_at, updated_at, "
                  "priority, campaign) VALUES(?,?,'queued',?,?,?,?,?,?,?)"));
  double now = wall_time_s();
  st.bind(1, row.id)
      .bind(2, row.service)
      .bind(3, row.attempt)
      .bind_blob(4, row.payload)
      .bind(5, row.timeout_s)
      .bind(6, row.created_at > 0 ? row.created_at : now)
      .bind(7, now)
      .bind(8, row.priority)
      .bind(9, row.campaign);
  KILN_RETURN_IF_ERROR(st.run());
  return db_.changes() > 0;
}

Status JobTable::mark_leased(const std::string& id, int attempt) {
  KILN_RETURN_IF_ERROR(check_write("lease"));
  KILN_ASSIGN_OR_RETURN(auto st, db_.prepare("UPDATE jobs SET state='leased', attempt=?, updated_at=? WHERE id=?"));
  st.bind(1, attempt).bind(2, wall_time_s()).bind(3, id);
  return st.run();
}

Status JobTable::requeue(const std::string& id, int attempt, const std::string& reason) {
  KILN_RETURN_IF_ERROR(check_write("requeue"));
  KILN_ASSIGN_OR_RETURN(auto st,
                        db_.prepare("UPDATE jobs SET state='queued', attempt=?, error=?, updated_at=? WHERE id=?"));
  st.bind(1, attempt).bind(2, reason).bind(3, wall_time_s()).bind(4, id);
  return st.run();
}

Result<std::vector<JobRow>> JobTable::complete(const std::string& id, JobState final_state, const std::string& result,
                                               const std::string& error, const std::vector<proto::FollowUp>& next) {
  KILN_RETURN_IF_ERROR(check_write("complete"));
  store::Transaction tx(db_);
  KILN_RETURN_IF_ERROR(tx.begin_status());
  double now = wall_time_s();
  // Follow-ups inherit the scheduling of the job whose result made them.
  int64_t priority = 0;
  std::string campaign;
  {
    KILN_ASSIGN_OR_RETURN(auto st, db_.prepare("SELECT priority, campaign FROM jobs WHERE id=?"));
    st.bind(1, id);
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (row) {
      priority = st.column_int(0);
      campaign = st.column_text(1);
    }
  }
  {
    KILN_ASSIGN_OR_RETURN(
        auto st, db_.prepare("UPDATE jobs SET state=?, result=?, error=?, payload=NULL, updated_at=? WHERE id=?"));
    st.bind(1, job_state_name(final_state)).bind_blob(2, result).bind(3, error).bind(4, now).bind(5, id);
    KILN_RETURN_IF_ERROR(st.run());
  }
  std::vector<JobRow> inserted;
  if (!next.empty()) {
    KILN_ASSIGN_OR_RETURN(
        auto ins,
        db_.prepare(
            "INSERT OR IGNORE INTO jobs(id, service, state, attempt, payload, timeout_s, created_at, updated_at, "
            "avoid_worker, priority, campaign, device) VALUES(?,?,'queued',1,?,?,?,?,?,?,?,?)"));
    for (const auto& f : next) {
      ins.bind(1, f.job_id)
          .bind(2, f.service)
          .bind_blob(3, f.payload.data)
          .bind(4, f.timeout_s)
          .bind(5, now)
          .bind(6, now)
          .bind(7, f.avoid_worker)
          .bind(8, priority)
          .bind(9, campaign)
          .bind(10, f.device);
      KILN_RETURN_IF_ERROR(ins.run());
      if (db_.changes() > 0) {
        JobRow r;
        r.id = f.job_id;
        r.service = f.service;
        r.payload = f.payload.data;
        r.timeout_s = f.timeout_s;
        r.created_at = now;
        r.avoid_worker = f.avoid_worker;
        r.device = f.device;
        r.priority = priority;
        r.campaign = campaign;
        inserted.push_back(std::move(r));
      }
    }
  }
  KILN_RETURN_IF_ERROR(tx.commit());
  return inserted;
}

Result<JobRow> JobTable::get(const std::string& id, std::string* result) {
  KILN_ASSIGN_OR_RETURN(auto st,
                        db_.prepare("SELECT service, state, attempt, error, result, created_at FROM jobs WHERE id=?"));
  st.bind(1, id);
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return not_found("no job '" + id + "'");
  JobRow r;
  r.id = id;
  r.service = st.column_text(0);
  r.state = parse_state(st.column_text(1));
  r.attempt = static_cast<int>(st.column_int(2));
  r.error = st.column_text(3);
  if (result) *result = st.column_blob(4);
  r.created_at = st.column_double(5);
  return r;
}

Result<int64_t> JobTable::prune_finished(double ended_before, int64_t keep_newest, int64_t batch) {
  double cutoff = ended_before;
  if (keep_newest > 0) {
    // The end time of the newest job beyond the ones kept: it and everything that ended before it go.
    KILN_ASSIGN_OR_RETURN(auto st, db_.prepare("SELECT updated_at FROM jobs WHERE " + std::string(kEnded) +
                                               " ORDER BY updated_at DESC LIMIT 1 OFFSET ?"));
    st.bind(1, keep_newest);
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (row) cutoff = std::max(cutoff, std::nextafter(st.column_double(0), 1e300));
  }
  if (cutoff <= 0 || batch <= 0) return int64_t{0};
  KILN_RETURN_IF_ERROR(check_write("prune"));
  KILN_ASSIGN_OR_RETURN(
      auto del, db_.prepare("DELETE FROM jobs WHERE rowid IN (SELECT rowid FROM jobs WHERE " + std::string(kEnded) +
                            " AND updated_at < ? ORDER BY updated_at LIMIT ?)"));
  del.bind(1, cutoff).bind(2, batch);
  KILN_RETURN_IF_ERROR(del.run());
  const int64_t deleted = db_.changes();
  if (deleted > 0) KILN_RETURN_IF_ERROR(release_free_pages());
  return deleted;
}

Status JobTable::release_free_pages() { return db_.exec("PRAGMA incremental_vacuum"); }

Result<TableStorage> JobTable::storage() {
  TableStorage s;
  KILN_ASSIGN_OR_RETURN(s.page_bytes, pragma_int(db_, "PRAGMA page_size"));
  KILN_ASSIGN_OR_RETURN(s.pages, pragma_int(db_, "PRAGMA page_count"));
  KILN_ASSIGN_OR_RETURN(s.free_pages, pragma_int(db_, "PRAGMA freelist_count"));
  return s;
}

Result<std::map<std::string, std::map<std::string, int64_t>>> JobTable::counts() {
  KILN_ASSIGN_OR_RETURN(auto st, db_.prepare("SELECT service, state, count(*) FROM jobs GROUP BY service, state"));
  std::map<std::string, std::map<std::string, int64_t>> out;
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) break;
    out[st.column_text(0)][st.column_text(1)] = st.column_int(2);
  }
  return out;
}

Status JobTable::put_blob(const std::string& sha256, const std::string& data) {
  KILN_RETURN_IF_ERROR(check_write("blob"));
  KILN_ASSIGN_OR_RETURN(auto st, db_.prepare("INSERT OR IGNORE INTO blobs(sha256, data, created_at) VALUES(?,?,?)"));
  st.bind(1, sha256).bind_blob(2, data).bind(3, wall_time_s());
  return st.run();
}

Result<std::string> JobTable::get_blob(const std::string& sha256) {
  KILN_ASSIGN_OR_RETURN(auto st, db_.prepare("SELECT data FROM blobs WHERE sha256=?"));
  st.bind(1, sha256);
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return not_found("no blob " + sha256);
  return st.column_blob(0);
}

Result<bool> JobTable::has_blob(const std::string& sha256) {
  KILN_ASSIGN_OR_RETURN(auto st, db_.prepare("SELECT 1 FROM blobs WHERE sha256=?"));
  st.bind(1, sha256);
  return st.step();
}

}  // namespace kiln::broker
