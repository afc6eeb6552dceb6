// Retention of ended jobs in the broker's job table: what is past the age or count limit is deleted (never
// a queued or leased job), the pages go back to the file system so the file stops growing, a file of an
// older broker is converted once, and follow-ups inherit their parent's scheduling. Ages are read against a
// clock the test passes, and the pass interval against a monotonic clock it moves: no sleeps.
#include <catch2/catch.hpp>
#include <prometheus/registry.h>

#include <filesystem>

#include "kiln/broker/job_table.h"
#include "kiln/broker/retention.h"
#include "kiln/core/files.h"
#include "kiln/core/time.h"
#include "kiln/store/sqlite.h"

using namespace kiln;
using broker::JobRow;
using broker::JobState;
using broker::JobTable;

namespace {

constexpr double kDay_s = 24 * 3600;

JobTable open_table(const std::string& path) {
  auto t = JobTable::open(path);
  INFO(t.status().message());
  REQUIRE(t.is_ok());
  return std::move(t).value();
}

JobRow row(const std::string& id) {
  JobRow r;
  r.id = id;
  r.service = "compile";
  r.payload = std::string(1500, 'p');
  return r;
}

// `n` jobs "<prefix>-<i>" submitted and finished with a result of the size a scorer answer has.
void run_jobs(JobTable& t, const std::string& prefix, int n) {
  for (int i = 0; i < n; ++i) {
    const std::string id = prefix + "-" + std::to_string(i);
    REQUIRE(t.insert(row(id)).value());
    REQUIRE(t.mark_leased(id, 1).is_ok());
    REQUIRE(t.complete(id, JobState::kDone, std::string(1200, 'r'), "", {}).is_ok());
  }
}

int64_t count(JobTable& t, const std::string& state) {
  auto counts = t.counts();
  REQUIRE(counts.is_ok());
  int64_t n = 0;
  for (auto& [service, by_state] : *counts) n += by_state[state];
  return n;
}

// The main file's size once the WAL is folded back into it (as a checkpoint leaves it).
int64_t file_bytes(const std::string& path) {
  auto db = store::Database::open(path);
  REQUIRE(db.is_ok());
  REQUIRE(db->exec("PRAGMA wal_checkpoint(TRUNCATE)").is_ok());
  return static_cast<int64_t>(std::filesystem::file_size(path));
}

}  // namespace

TEST_CASE("retention: ended jobs past the count limit go, queued and leased ones stay", "[broker][retention]") {
  TempDir dir("kiln-retention");
  JobTable t = open_table(dir.path() + "/broker.db");
  run_jobs(t, "old", 30);
  REQUIRE(t.insert(row("waiting")).value());
  REQUIRE(t.insert(row("running")).value());
  REQUIRE(t.mark_leased("running", 1).is_ok());
  auto deleted = t.prune_finished(0, 10, 1000);
  REQUIRE(deleted.is_ok());
  CHECK(*deleted == 20);
  CHECK(count(t, "done") == 10);
  CHECK(t.get("old-29").is_ok());  // the newest stay
  CHECK_FALSE(t.get("old-0").is_ok());
  CHECK(t.get("waiting")->state == JobState::kQueued);
  CHECK(t.get("running")->state == JobState::kLeased);
  // A batch bounds one pass.
  REQUIRE(t.prune_finished(0, 4, 3).value() == 3);
  CHECK(count(t, "done") == 7);
  // No limit: nothing goes.
  CHECK(t.prune_finished(0, 0, 1000).value() == 0);
}

TEST_CASE("retention: the age limit reads the clock it is given, on the interval it is given", "[broker][retention]") {
  TempDir dir("kiln-retention");
  JobTable t = open_table(dir.path() + "/broker.db");
  run_jobs(t, "j", 5);
  prometheus::Registry registry;
  broker::BrokerMetrics metrics(registry);
  broker::RetentionOptions opt;
  opt.finished_max_age_s = 7 * kDay_s;
  opt.finished_max_jobs = 0;
  broker::TableRetention retention(t, opt, 60, metrics);
  const double today = wall_time_s();
  retention.tick(1000, today);  // a pass: nothing is a week old
  CHECK(count(t, "done") == 5);
  retention.tick(1030, today + 8 * kDay_s);  // not due yet
  CHECK(count(t, "done") == 5);
  retention.tick(1061, today + 8 * kDay_s);  // due, and every job is past the limit
  CHECK(count(t, "done") == 0);
}

TEST_CASE("retention: the file stops growing once retention runs, and shrinks after a purge", "[broker][retention]") {
  TempDir dir("kiln-retention");
  const std::string path = dir.path() + "/broker.db";
  JobTable t = open_table(path);
  // Without retention the file grows with every round of jobs.
  run_jobs(t, "a", 300);
  const int64_t after_one = file_bytes(path);
  run_jobs(t, "b", 300);
  const int64_t after_two = file_bytes(path);
  CHECK(after_two > after_one + 300 * 1000);
  // Keeping the newest 300: round after round, the file stays the size it had with 600 jobs at most.
  for (int round = 0; round < 8; ++round) {
    run_jobs(t, "r" + std::to_string(round), 300);
    REQUIRE(t.prune_finished(0, 300, 100000).is_ok());
    CHECK(file_bytes(path) <= after_two);
  }
  // Purging everything gives the space back.
  REQUIRE(t.prune_finished(wall_time_s() + 1, 0, 100000).is_ok());
  CHECK(count(t, "done") == 0);
  auto storage = t.storage();
  REQUIRE(storage.is_ok());
  CHECK(storage->free_pages == 0);
  CHECK(file_bytes(path) < after_one / 4);
}

TEST_CASE("retention: a table of an older broker is converted once and keeps its jobs", "[broker][retention]") {
  TempDir dir("kiln-retention");
  const std::string path = dir.path() + "/broker.db";
  {
    // The schema of a broker before incremental vacuum, priorities and campaigns.
    auto db = store::Database::open(path);
    REQUIRE(db.is_ok());
    REQUIRE(db->exec("CREATE TABLE jobs (id TEXT PRIMARY KEY, service TEXT NOT NULL, state TEXT NOT NULL, attempt "
                     "INTEGER NOT NULL, payload BLOB, result BLOB, error TEXT NOT NULL DEFAULT '', timeout_s REAL NOT "
                     "NULL DEFAULT 0, created_at REAL NOT NULL, updated_at REAL NOT NULL);"
                     "INSERT INTO jobs VALUES('kept', 'compile', 'queued', 1, x'00', NULL, '', 0, 1, 1);")
                .is_ok());
    auto mode = db->prepare("PRAGMA auto_vacuum");
    REQUIRE(mode.is_ok());
    REQUIRE(mode->step().value());
    REQUIRE(mode->column_int(0) == 0);
  }
  JobTable t = open_table(path);
  auto active = t.load_active();
  REQUIRE(active.is_ok());
  REQUIRE(active->size() == 1);
  CHECK(active->front().id == "kept");
  CHECK(active->front().priority == 0);
  CHECK(active->front().campaign.empty());
  auto db = store::Database::open(path);
  REQUIRE(db.is_ok());
  auto mode = db->prepare("PRAGMA auto_vacuum");
  REQUIRE(mode.is_ok());
  REQUIRE(mode->step().value());
  CHECK(mode->column_int(0) == 2);  // incremental
}

TEST_CASE("job table: follow-ups inherit the priority and campaign of the job that made them",
          "[broker][retention][scheduling]") {
  TempDir dir("kiln-retention");
  JobTable t = open_table(dir.path() + "/broker.db");
  JobRow start = row("campaign:c7:start");
  start.priority = 3;
  start.campaign = "c7";
  REQUIRE(t.insert(start).value());
  REQUIRE(t.mark_leased(start.id, 1).is_ok());
  auto next = t.complete(start.id, JobState::kDone, "", "", {{"compile", "c7/p0:compile", {"c"}, 0, ""}});
  REQUIRE(next.is_ok());
  REQUIRE(next->size() == 1);
  CHECK(next->front().priority == 3);
  CHECK(next->front().campaign == "c7");
  auto active = t.load_active();
  REQUIRE(active.is_ok());
  REQUIRE(active->size() == 1);
  CHECK(active->front().priority == 3);  // and a restarted broker reads them back
  CHECK(active->front().campaign == "c7");
}
