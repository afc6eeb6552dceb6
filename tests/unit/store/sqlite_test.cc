#include <catch2/catch.hpp>

#include <vector>

#include "kiln/core/files.h"
#include "kiln/store/sqlite.h"

using kiln::store::Database;
using kiln::store::Transaction;

TEST_CASE("sqlite stores and reads back rows, blobs included", "[store]") {
  kiln::TempDir dir;
  auto db = Database::open(dir.path() + "/t.db");
  REQUIRE(db.is_ok());
  REQUIRE(db->exec("CREATE TABLE t(k TEXT PRIMARY KEY, n INTEGER, x REAL, b BLOB)").is_ok());
  auto ins = db->prepare("INSERT INTO t VALUES(?,?,?,?)");
  REQUIRE(ins.is_ok());
  std::string blob("\0\1\2", 3);
  REQUIRE(ins->bind(1, "a").bind(2, int64_t{42}).bind(3, 2.5).bind_blob(4, blob).run().is_ok());
  REQUIRE(ins->bind(1, "a").bind(2, 1).bind(3, 0.0).bind_blob(4, "").run().code() ==
          kiln::StatusCode::kInternal);  // primary key violation is an error value

  auto sel = db->prepare("SELECT n, x, b FROM t WHERE k=?");
  REQUIRE(sel.is_ok());
  sel->bind(1, "a");
  auto row = sel->step();
  REQUIRE(row.is_ok());
  REQUIRE(*row);
  CHECK(sel->column_int(0) == 42);
  CHECK(sel->column_double(1) == 2.5);
  CHECK(sel->column_blob(2) == blob);
}

TEST_CASE("a transaction rolls back unless committed", "[store]") {
  auto db = Database::open(":memory:");
  REQUIRE(db.is_ok());
  REQUIRE(db->exec("CREATE TABLE t(n INTEGER)").is_ok());
  {
    Transaction tx(*db);
    REQUIRE(db->exec("INSERT INTO t VALUES(1)").is_ok());
  }
  {
    Transaction tx(*db);
    REQUIRE(db->exec("INSERT INTO t VALUES(2)").is_ok());
    REQUIRE(tx.commit().is_ok());
  }
  auto sel = db->prepare("SELECT group_concat(n) FROM t");
  REQUIRE(sel.is_ok());
  REQUIRE(*sel->step());
  CHECK(sel->column_text(0) == "2");
}

TEST_CASE("for_each maps every row and stops at the first error", "[store]") {
  auto db = Database::open(":memory:");
  REQUIRE(db.is_ok());
  REQUIRE(db->exec("CREATE TABLE t(n INTEGER); INSERT INTO t VALUES(1), (2), (3)").is_ok());
  auto sel = db->prepare("SELECT n FROM t ORDER BY n");
  REQUIRE(sel.is_ok());
  std::vector<int64_t> seen;
  REQUIRE(sel->for_each([&](const kiln::store::Statement& row) {
               seen.push_back(row.column_int(0));
               return kiln::Status::ok();
             })
              .is_ok());
  CHECK(seen == std::vector<int64_t>{1, 2, 3});

  auto again = db->prepare("SELECT n FROM t ORDER BY n");
  REQUIRE(again.is_ok());
  seen.clear();
  kiln::Status st = again->for_each([&](const kiln::store::Statement& row) {
    seen.push_back(row.column_int(0));
    return row.column_int(0) == 2 ? kiln::internal_error("row 2 is broken") : kiln::Status::ok();
  });
  CHECK(st.message() == "row 2 is broken");
  CHECK(seen == std::vector<int64_t>{1, 2});
}
