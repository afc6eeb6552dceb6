#include "kiln/scorer/handler.h"

#include <catch2/catch.hpp>

#include <filesystem>

#include "kiln/testing/campaign_fixtures.h"
#include "kiln/testing/metric_value.h"
#include "kiln/core/files.h"
#include "kiln/store/sqlite.h"

using namespace kiln;
using kiln::testing::correct;
using kiln::testing::decode_or_die;
using kiln::testing::metric_value;

namespace {

proto::Job job(const std::string& id, std::string payload) {
  proto::Job j;
  j.job_id = id;
  j.service = "score";
  j.payload.data = std::move(payload);
  return j;
}

proto::Request request(const std::string& method, const std::string& campaign_id = "", int64_t top = 5) {
  proto::Request r;
  r.request_id = "r1";
  r.service = "score";
  r.method = method;
  proto::CampaignQuery q;
  q.campaign_id = campaign_id;
  q.top = top;
  r.body.data = proto::encode(q);
  return r;
}

std::string start(const std::string& id, int64_t budget, int64_t mif) {
  return proto::encode(kiln::testing::campaign_start(id, budget, mif));
}

// The same outcome, and the same RESULT on the wire, byte for byte.
bool same(const messaging::JobOutcome& a, const messaging::JobOutcome& b) {
  const proto::Job j = job("j", "");
  return a.outcome == b.outcome &&
         proto::encode(messaging::to_result(j, a)) == proto::encode(messaging::to_result(j, b));
}

}  // namespace

TEST_CASE("the scorer handler turns engine answers into job outcomes", "[scorer]") {
  TempDir dir("kiln-scorer-test");
  auto registry = std::make_shared<prometheus::Registry>();
  auto opened = scorer::ScorerHandler::open(dir.path() + "/archive.db", {}, registry);
  REQUIRE(opened.is_ok());
  scorer::ScorerHandler& h = **opened;

  messaging::JobOutcome started = h.handle_job(job("c1:start", start("c1", 2, 2)));
  REQUIRE(started.outcome == messaging::Outcome::kDone);
  REQUIRE(started.next.size() == 3);
  CHECK(decode_or_die<proto::CampaignInfo>(started.payload).campaign_id == "c1");

  auto p0 = decode_or_die<proto::CompileRequest>(started.next[0].payload.data).cand;
  messaging::JobOutcome scored = h.handle_job(job("c1/p0:score", proto::encode(correct(p0, 1.3, 1.05, 1.5))));
  CHECK(scored.outcome == messaging::Outcome::kDone);
  CHECK(metric_value(*registry, "kiln_campaign_best_speedup", {{"task", "scale_test"}}) == Approx(1.3));

  SECTION("a redelivered job gets the same outcome") {
    messaging::JobOutcome again = h.handle_job(job("c1:start", start("c1", 2, 2)));
    CHECK(same(again, started));
    CHECK(metric_value(*registry, "kiln_scorer_replayed_jobs_total") == 1);
  }
  SECTION("a duplicate result is counted") {
    h.handle_job(job("c1/p0:score-2", proto::encode(correct(p0, 9.0, 9.0, 9.0))));
    CHECK(metric_value(*registry, "kiln_scorer_duplicate_results_total") == 1);
    CHECK(metric_value(*registry, "kiln_campaign_best_speedup", {{"task", "scale_test"}}) == Approx(1.3));
  }
  SECTION("bad input fails the job") {
    messaging::JobOutcome bad = h.handle_job(job("x", "garbage"));
    CHECK(bad.outcome == messaging::Outcome::kDeadLetter);
    CHECK(bad.next.empty());
    // On the wire, as before: "failed", and no dead letter to the scorer about its own job.
    const proto::ResultMsg wire = messaging::to_result(job("x", "garbage"), bad);
    CHECK(wire.outcome == "failed");
    CHECK(wire.next.empty());
  }
  SECTION("queries") {
    auto list = h.handle_request(request("campaigns"));
    REQUIRE(list.is_ok());
    CHECK(decode_or_die<proto::CampaignList>(*list).campaigns.size() == 1);

    proto::Request no_body = request("campaigns");
    no_body.body.data.clear();
    REQUIRE(h.handle_request(no_body).is_ok());

    auto info = h.handle_request(request("campaign", "c1"));
    REQUIRE(info.is_ok());
    proto::CampaignInfo ci = decode_or_die<proto::CampaignInfo>(*info);
    CHECK(ci.scored == 1);
    CHECK(ci.proposed == 2);
    CHECK(ci.best_program_id == "c1/p0");
    CHECK(ci.best_params.at("BLOCK") == "64");

    auto best = h.handle_request(request("best", "c1", 3));
    REQUIRE(best.is_ok());
    proto::BestPrograms bp = decode_or_die<proto::BestPrograms>(*best);
    REQUIRE(bp.programs.size() == 1);
    CHECK(bp.programs[0].id == "c1/p0");
    CHECK(bp.programs[0].eval.perf_score == 5);

    CHECK(h.handle_request(request("campaign", "nope")).status().code() == StatusCode::kNotFound);
    CHECK(h.handle_request(request("campaign")).status().code() == StatusCode::kInvalidArgument);
    CHECK(h.handle_request(request("best")).status().code() == StatusCode::kInvalidArgument);
    CHECK(h.handle_request(request("drop_tables")).status().code() == StatusCode::kInvalidArgument);
    proto::Request junk = request("campaign");
    junk.body.data = "junk";
    CHECK_FALSE(h.handle_request(junk).is_ok());
  }
}

TEST_CASE("the scorer answers by the shared outcome rules", "[scorer]") {
  TempDir dir("kiln-scorer-outcome-test");
  const std::string db_path = dir.path() + "/archive.db";
  auto opened = scorer::ScorerHandler::open(db_path, {}, nullptr);
  REQUIRE(opened.is_ok());
  scorer::ScorerHandler& h = **opened;
  messaging::JobOutcome started = h.handle_job(job("c1:start", start("c1", 2, 1)));
  REQUIRE(started.outcome == messaging::Outcome::kDone);
  auto p0 = decode_or_die<proto::CompileRequest>(started.next[0].payload.data).cand;
  auto other = store::Database::open(db_path);  // a second writer on the same archive
  REQUIRE(other.is_ok());

  SECTION("a busy archive is given back, and the job is handled once it is free") {
    REQUIRE(other->exec("BEGIN IMMEDIATE").is_ok());
    messaging::JobOutcome busy = h.handle_job(job("c2:start", start("c2", 2, 1)));
    CHECK(busy.outcome == messaging::Outcome::kRetry);
    CHECK(busy.next.empty());
    REQUIRE(other->exec("ROLLBACK").is_ok());
    CHECK(h.handle_job(job("c2:start", start("c2", 2, 1))).outcome == messaging::Outcome::kDone);
  }
  SECTION("a broken archive is dead-lettered, not retried") {
    REQUIRE(other->exec("UPDATE programs SET record = x'c1' WHERE id = 'c1/p0'").is_ok());
    messaging::JobOutcome broken = h.handle_job(job("c1/p0:score", proto::encode(correct(p0, 1.3, 1.05, 1.5))));
    CHECK(broken.outcome == messaging::Outcome::kDeadLetter);
    CHECK(broken.error.find("program c1/p0: stored record") != std::string::npos);
  }
  SECTION("the candidate's own failure is a verdict it is scored on: the score job is done, never given back") {
    messaging::JobOutcome wrong =
        h.handle_job(job("c1/p0:score", proto::encode(kiln::testing::test_result(p0, proto::TestStatus::kMismatch))));
    CHECK(wrong.outcome == messaging::Outcome::kDone);
    CHECK(wrong.error.empty());
  }
  SECTION("input that names nothing known is the job's fault, never the candidate's") {
    proto::Candidate stray = p0;
    stray.campaign_id = "c7";
    stray.program_id = "c7/p0";
    messaging::JobOutcome unknown = h.handle_job(job("c7/p0:score", proto::encode(correct(stray, 1.3, 1.05, 1.5))));
    CHECK(unknown.outcome == messaging::Outcome::kDeadLetter);
    CHECK(h.handle_job(job("x", "garbage")).outcome == messaging::Outcome::kDeadLetter);
  }
}

TEST_CASE("make_scorer_handlers keeps the archive in the state dir across restarts", "[scorer]") {
  CHECK(scorer::resolve_db_path("archive.db", "/state") == "/state/archive.db");
  CHECK(scorer::resolve_db_path("archive.db", "/state/") == "/state/archive.db");
  CHECK(scorer::resolve_db_path("/abs/a.db", "/state") == "/abs/a.db");
  CHECK(scorer::resolve_db_path(":memory:", "/state") == ":memory:");

  TempDir dir("kiln-scorer-svc-test");
  config::KilnConfig cfg;
  cfg.scorer.min_speedup = 1.2;
  service::ServiceContext ctx;
  ctx.config = &cfg;
  ctx.state_dir = dir.path();
  ctx.worker_id = "w1";
  ctx.metrics = std::make_shared<prometheus::Registry>();

  messaging::JobOutcome first;
  {
    auto h = scorer::make_scorer_handlers(ctx);
    REQUIRE(h.is_ok());
    CHECK(h->slots == 1);
    CHECK(h->service == "score");
    REQUIRE(h->job);
    REQUIRE(h->request);
    first = h->job(job("c1:start", start("c1", 3, 1)));
    REQUIRE(first.outcome == messaging::Outcome::kDone);
    auto p0 = decode_or_die<proto::CompileRequest>(first.next[0].payload.data).cand;
    // 1.15 clears the default 1.10 but not this config's 1.2: no confirmation.
    messaging::JobOutcome scored = h->job(job("c1/p0:score", proto::encode(correct(p0, 1.15, 1.15, 1.2))));
    for (const auto& f : scored.next) CHECK(f.job_id.find("confirm") == std::string::npos);
  }
  CHECK(std::filesystem::exists(dir.path() + "/archive.db"));

  // A new process: nothing re-seeded, counters intact, old jobs still answered the same way.
  auto h = scorer::make_scorer_handlers(ctx);
  REQUIRE(h.is_ok());
  auto info = h->request(request("campaign", "c1"));
  REQUIRE(info.is_ok());
  proto::CampaignInfo ci = decode_or_die<proto::CampaignInfo>(*info);
  CHECK(ci.proposed == 1);
  CHECK(ci.scored == 1);
  CHECK(ci.in_flight == 1);
  CHECK(ci.state == "running");
  CHECK(same(h->job(job("c1:start", start("c1", 3, 1))), first));
  auto list = h->request(request("campaigns"));
  CHECK(decode_or_die<proto::CampaignList>(*list).campaigns.size() == 1);

  // A db path with a folder of its own gets it created.
  cfg.scorer.db_path = "archive/nested.db";
  REQUIRE(scorer::make_scorer_handlers(ctx).is_ok());
  CHECK(std::filesystem::exists(dir.path() + "/archive/nested.db"));
}
