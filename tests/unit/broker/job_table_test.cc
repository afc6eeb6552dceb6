// The broker's durable job table alone, without sockets: every state change survives a reopen, follow-ups
// land with their parent's completion or not at all, and a table that cannot write says so and loses nothing.
#include <catch2/catch.hpp>

#include "kiln/broker/job_table.h"
#include "kiln/core/files.h"

using namespace kiln;
using broker::JobRow;
using broker::JobState;
using broker::JobTable;

namespace {

// The payload a restarted broker would lease the job with (get() is a status query: no payload).
std::string active_payload(JobTable& t, const std::string& id) {
  auto active = t.load_active();
  REQUIRE(active.is_ok());
  for (const auto& r : *active)
    if (r.id == id) return r.payload;
  return "<not active>";
}

JobRow row(const std::string& id, const std::string& service = "compile") {
  JobRow r;
  r.id = id;
  r.service = service;
  r.payload = "payload of " + id;
  r.timeout_s = 30;
  r.created_at = 1.0;
  return r;
}

JobTable open_table(const std::string& path, int64_t max_bytes = 0) {
  auto t = JobTable::open(path, max_bytes);
  INFO(t.status().message());
  REQUIRE(t.is_ok());
  return std::move(t).value();
}

}  // namespace

TEST_CASE("job table: a submit is idempotent and every state change survives a reopen", "[broker][job_table]") {
  TempDir dir("kiln-jobtable");
  const std::string path = dir.path() + "/broker.db";
  {
    JobTable t = open_table(path);
    REQUIRE(t.insert(row("a")).value());
    CHECK_FALSE(t.insert(row("a")).value());  // the same id again: nothing new
    REQUIRE(t.insert(row("b", "test.cpu")).value());
    REQUIRE(t.mark_leased("a", 1).is_ok());
    REQUIRE(t.requeue("a", 2, "worker lost").is_ok());
    REQUIRE(t.mark_leased("b", 1).is_ok());
  }
  JobTable t = open_table(path);  // as a restarted broker does
  auto active = t.load_active();
  REQUIRE(active.is_ok());
  REQUIRE(active->size() == 2);
  auto a = t.get("a");
  REQUIRE(a.is_ok());
  CHECK(a->state == JobState::kQueued);
  CHECK(a->attempt == 2);
  CHECK(active_payload(t, "a") == "payload of a");
  CHECK(a->error == "worker lost");
  auto b = t.get("b");
  REQUIRE(b.is_ok());
  CHECK(b->state == JobState::kLeased);
  auto counts = t.counts();
  REQUIRE(counts.is_ok());
  CHECK((*counts)["compile"]["queued"] == 1);
  CHECK((*counts)["test.cpu"]["leased"] == 1);
  CHECK_FALSE(t.get("nope").is_ok());
}

TEST_CASE("job table: a completion and its follow-ups are one transaction, duplicates dropped", "[broker][job_table]") {
  TempDir dir("kiln-jobtable");
  JobTable t = open_table(dir.path() + "/broker.db");
  REQUIRE(t.insert(row("c1/p1:compile")).value());
  REQUIRE(t.insert(row("c1/p1:test", "test.cpu")).value());  // already there: its follow-up is a duplicate
  REQUIRE(t.mark_leased("c1/p1:compile", 1).is_ok());
  std::vector<proto::FollowUp> next = {{"test.cpu", "c1/p1:test", {"t"}, 0, ""},
                                       {"score", "c1/p1:score", {"s"}, 5, "tester-1"}};
  auto fresh = t.complete("c1/p1:compile", JobState::kDone, "result bytes", "", next);
  REQUIRE(fresh.is_ok());
  REQUIRE(fresh->size() == 1);
  CHECK(fresh->front().id == "c1/p1:score");
  CHECK(fresh->front().avoid_worker == "tester-1");
  CHECK(fresh->front().timeout_s == 5);
  std::string result;
  auto done = t.get("c1/p1:compile", &result);
  REQUIRE(done.is_ok());
  CHECK(done->state == JobState::kDone);
  CHECK(result == "result bytes");
  auto active = t.load_active();
  REQUIRE(active.is_ok());
  CHECK(active->size() == 2);  // the test job and the new score job; the compile job is finished
}

TEST_CASE("job table: a write that fails changes nothing, and the next one succeeds", "[broker][job_table]") {
  TempDir dir("kiln-jobtable");
  JobTable t = open_table(dir.path() + "/broker.db");
  REQUIRE(t.insert(row("x")).value());
  REQUIRE(t.mark_leased("x", 1).is_ok());
  bool disk_full = true;
  t.set_write_fault([&](std::string_view op) {
    return disk_full ? unavailable("disk full (" + std::string(op) + ")") : Status::ok();
  });
  CHECK_FALSE(t.insert(row("y")).is_ok());
  auto failed = t.complete("x", JobState::kDone, "r", "", {{"score", "x:score", {"s"}, 0, ""}});
  REQUIRE_FALSE(failed.is_ok());
  CHECK(failed.status().message().find("disk full (complete)") != std::string::npos);
  CHECK(t.get("x")->state == JobState::kLeased);  // still leased: the result can be written again later
  CHECK_FALSE(t.get("x:score").is_ok());          // and its follow-up did not half-land
  disk_full = false;
  REQUIRE(t.complete("x", JobState::kDone, "r", "", {{"score", "x:score", {"s"}, 0, ""}}).is_ok());
  CHECK(t.get("x:score")->state == JobState::kQueued);
}

TEST_CASE("job table: a bounded file refuses writes past its size instead of filling the disk", "[broker][job_table]") {
  TempDir dir("kiln-jobtable");
  JobTable t = open_table(dir.path() + "/broker.db", 256 * 1024);
  const std::string big(32 * 1024, 'x');
  int inserted = 0;
  Status last = Status::ok();
  for (int i = 0; i < 64 && last.is_ok(); ++i) {
    JobRow r = row("big-" + std::to_string(i));
    r.payload = big;
    auto ins = t.insert(r);
    last = ins.status();
    if (ins.is_ok()) ++inserted;
  }
  CHECK_FALSE(last.is_ok());
  CHECK(inserted > 0);
  CHECK(inserted < 64);
  // What was written before the bound is intact.
  CHECK(active_payload(t, "big-0") == big);
}
