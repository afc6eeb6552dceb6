// SQLite, RAII-owned. One Database per thread of use; WAL journal so readers never block the writer.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "kiln/core/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace kiln::store {

class Statement;

class Database {
 public:
  // Opens (creating) a database file with WAL, foreign keys on and a busy timeout. ":memory:" works.
  static Result<Database> open(const std::string& path);
  ~Database();
  Database(Database&& other) noexcept;
  Database& operator=(Database&& other) noexcept;
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Runs one or more statements without results (schema, pragmas).
  Status exec(std::string_view sql);
  Result<Statement> prepare(std::string_view sql);
  int64_t last_insert_rowid() const;
  int changes() const;
  sqlite3* handle() { return db_; }

 private:
  explicit Database(sqlite3* db) : db_(db) {}
  sqlite3* db_ = nullptr;
};

class Statement {
 public:
  ~Statement();
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Parameters are 1-based, as in SQLite.
  Statement& bind(int index, int64_t v);
  Statement& bind(int index, int v) { return bind(index, static_cast<int64_t>(v)); }
  Statement& bind(int index, double v);
  Statement& bind(int index, std::string_view text);
  Statement& bind(int index, const char* text) { return bind(index, std::string_view(text)); }
  Statement& bind(int index, const std::string& text) { return bind(index, std::string_view(text)); }
  Statement& bind_blob(int index, std::string_view bytes);
  Statement& bind_null(int index);

  // Steps once: true when a row is available, false when done; an error as a Status.
  Result<bool> step();
  // Steps to completion, ignoring rows.
  Status run();
  // Steps through every row, calling `row` on each (its columns read through the statement); stops at
  // the first error, the step's or the one `row` returns.
  Status for_each(const std::function<Status(const Statement&)>& row);
  void reset();

  int64_t column_int(int col) const;
  double column_double(int col) const;
  std::string column_text(int col) const;
  std::string column_blob(int col) const;
  bool column_is_null(int col) const;

 private:
  friend class Database;
  Statement(sqlite3_stmt* stmt, sqlite3* db) : stmt_(stmt), db_(db) {}
  sqlite3_stmt* stmt_ = nullptr;
  sqlite3* db_ = nullptr;
  Status bind_error_;
};

// BEGIN IMMEDIATE on construction; ROLLBACK on destruction unless commit() succeeded.
class Transaction {
 public:
  explicit Transaction(Database& db);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  const Status& begin_status() const { return begin_; }
  Status commit();

 private:
  Database& db_;
  Status begin_;
  bool done_ = false;
};

}  // namespace kiln::store
