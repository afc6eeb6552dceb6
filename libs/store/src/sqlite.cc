#include "kiln/store/sqlite.h"

#include <sqlite3.h>

#include <utility>

namespace kiln::store {

namespace {
Status sqlite_error(sqlite3* db, int rc, std::string_view what) {
  std::string msg(what);
  msg += ": ";
  msg += db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  // A busy or locked database is transient; anything else is a bug or a broken file.
  if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) return unavailable(std::move(msg));
  return internal_error(std::move(msg));
}
}  // namespace

Result<Database> Database::open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status st = sqlite_error(db, rc, "open " + path);
    sqlite3_close(db);
    return st;
  }
  Database d(db);
  sqlite3_busy_timeout(db, 5000);
  // WAL: readers do not block the writer; NORMAL sync is durable across process crashes in WAL mode.
  KILN_RETURN_IF_ERROR(d.exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;"));
  return d;
}

Database::~Database() {
  if (db_) sqlite3_close_v2(db_);
}

Database::Database(Database&& other) noexcept : db_(std::exchange(other.db_, nullptr)) {}

Database& Database::operator=(Database&& other) noexcept {
  if (this != &other) {
    if (db_) sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
  }
  return *this;
}

Status Database::exec(std::string_view sql) {
  char* err = nullptr;
  std::string s(sql);
  int rc = sqlite3_exec(db_, s.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) return unavailable("sqlite exec: " + msg);
    return internal_error("sqlite exec: " + msg);
  }
  return Status::ok();
}

Result<Statement> Database::prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) return sqlite_error(db_, rc, "prepare");
  return Statement(stmt, db_);
}

int64_t Database::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }
int Database::changes() const { return sqlite3_changes(db_); }

Statement::~Statement() {
  if (stmt_) sqlite3_finalize(stmt_);
}

Statement::Statement(Statement&& other) noexcept
    : stmt_(std::exchange(other.stmt_, nullptr)), db_(other.db_), bind_error_(std::move(other.bind_error_)) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    if (stmt_) sqlite3_finalize(stmt_);
    stmt_ = std::exchange(other.stmt_, nullptr);
    db_ = other.db_;
    bind_error_ = std::move(other.bind_error_);
  }
  return *this;
}

#define KILN_BIND(call)                                                      \
  do {                                                                       \
    int rc_ = (call);                                                        \
    if (rc_ != SQLITE_OK && bind_error_.is_ok())                             \
      bind_error_ = sqlite_error(db_, rc_, "bind " + std::to_string(index)); \
  } while (0)

Statement& Statement::bind(int index, int64_t v) {
  KILN_BIND(sqlite3_bind_int64(stmt_, index, v));
  return *this;
}
Statement& Statement::bind(int index, double v) {
  KILN_BIND(sqlite3_bind_double(stmt_, index, v));
  return *this;
}
Statement& Statement::bind(int index, std::string_view text) {
  KILN_BIND(sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
  return *this;
}
Statement& Statement::bind_blob(int index, std::string_view bytes) {
  // A zero-length blob must still be a blob, not NULL.
  static const char kEmpty = 0;
  KILN_BIND(sqlite3_bind_blob64(stmt_, index, bytes.empty() ? &kEmpty : bytes.data(), bytes.size(), SQLITE_TRANSIENT));
  return *this;
}
Statement& Statement::bind_null(int index) {
  KILN_BIND(sqlite3_bind_null(stmt_, index));
  return *this;
}
#undef KILN_BIND

Result<bool> Statement::step() {
  if (!bind_error_.is_ok()) return bind_error_;
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return sqlite_error(db_, rc, "step");
}

Status Statement::run() {
  while (true) {
    auto r = step();
    if (!r.is_ok()) return r.status();
    if (!*r) break;
  }
  reset();
  return Status::ok();
}

Status Statement::for_each(const std::function<Status(const Statement&)>& row) {
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool has_row, step());
    if (!has_row) return Status::ok();
    KILN_RETURN_IF_ERROR(row(*this));
  }
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bind_error_ = Status::ok();
}

int64_t Statement::column_int(int col) const { return sqlite3_column_int64(stmt_, col); }
double Statement::column_double(int col) const { return sqlite3_column_double(stmt_, col); }
std::string Statement::column_text(int col) const {
  const unsigned char* p = sqlite3_column_text(stmt_, col);
  int n = sqlite3_column_bytes(stmt_, col);
  return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n)) : std::string();
}
std::string Statement::column_blob(int col) const {
  const void* p = sqlite3_column_blob(stmt_, col);
  int n = sqlite3_column_bytes(stmt_, col);
  return p ? std::string(static_cast<const char*>(p), static_cast<size_t>(n)) : std::string();
}
bool Statement::column_is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

Transaction::Transaction(Database& db) : db_(db) { begin_ = db_.exec("BEGIN IMMEDIATE"); }

Transaction::~Transaction() {
  if (!done_ && begin_.is_ok()) (void)db_.exec("ROLLBACK");
}

Status Transaction::commit() {
  if (!begin_.is_ok()) return begin_;
  Status st = db_.exec("COMMIT");
  if (st.is_ok()) done_ = true;
  return st;
}

}  // namespace kiln::store
