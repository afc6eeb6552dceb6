#include <prometheus/text_serializer.h>

#include <catch2/catch.hpp>

#include "kiln/core/time.h"
#include "kiln/task/task.h"
#include "kiln/task_ingest/handler.h"

using kiln::messaging::JobOutcome;
using kiln::messaging::Outcome;
using kiln::task_ingest::IngestHandler;

namespace {

kiln::proto::FileMap package(const std::string& name) {
  auto files = kiln::task::load_package(std::string(KILN_SOURCE_DIR) + "/tests/data/tasks/" + name);
  REQUIRE(files.is_ok());
  return *files;
}

kiln::proto::Job job_for(const kiln::proto::IngestRequest& r) {
  kiln::proto::Job job;
  job.job_id = "ingest:" + r.campaign_id;
  job.service = "ingest";
  job.payload.data = kiln::proto::encode(r);
  return job;
}

kiln::proto::IngestRequest request(const std::string& fixture) {
  kiln::proto::IngestRequest r;
  r.campaign_id = "rmsnorm-001";
  r.budget = 8;
  r.proposer = "tuner";
  r.max_in_flight = 3;
  r.files = package(fixture);
  return r;
}

}  // namespace

TEST_CASE("a valid package starts a campaign on the scorer", "[ingest]") {
  auto metrics = std::make_shared<prometheus::Registry>();
  IngestHandler handler({}, metrics);
  auto req = request("good_cpu");
  double before = kiln::wall_time_s();
  JobOutcome out = handler.handle(job_for(req));
  REQUIRE(out.outcome == Outcome::kDone);
  REQUIRE(out.next.size() == 1);
  CHECK(out.next[0].service == "score");
  CHECK(out.next[0].job_id == "campaign:rmsnorm-001:start");
  CHECK(out.payload == out.next[0].payload.data);

  CHECK(kiln::proto::peek_string(out.payload, "kind").value() == "campaign.start");
  auto start = kiln::proto::decode<kiln::proto::CampaignStart>(out.payload);
  REQUIRE(start.is_ok());
  CHECK(start->campaign_id == "rmsnorm-001");
  CHECK(start->task_id == kiln::proto::task_id(req.files));
  CHECK(start->task_name == "rmsnorm_cpu");
  CHECK(start->budget == 8);
  CHECK(start->proposer == "tuner");
  CHECK(start->max_in_flight == 3);
  CHECK(start->files == req.files);
  CHECK(start->submitted_at >= before);
  CHECK(start->submitted_at <= kiln::wall_time_s());
  CHECK(start->target_speedup == 0);
  CHECK(start->patience == 0);

  auto text = prometheus::TextSerializer().Serialize(metrics->Collect());
  CHECK(text.find("kiln_tasks_ingested_total{outcome=\"accepted\"} 1") != std::string::npos);
}

TEST_CASE("the submitter's early-stop settings reach the campaign", "[ingest]") {
  IngestHandler handler({}, std::make_shared<prometheus::Registry>());
  auto req = request("good_cpu");
  req.target_speedup = 1.5;
  req.patience = 6;
  JobOutcome out = handler.handle(job_for(req));
  REQUIRE(out.outcome == Outcome::kDone);
  auto start = kiln::proto::decode<kiln::proto::CampaignStart>(out.payload);
  REQUIRE(start.is_ok());
  CHECK(start->target_speedup == 1.5);
  CHECK(start->patience == 6);
  req.patience = -1;
  CHECK(handler.handle(job_for(req)).outcome == Outcome::kCandidateFault);
}

TEST_CASE("broken packages fail the job with the validation line and no follow-up", "[ingest]") {
  IngestHandler handler({}, nullptr);
  struct Case {
    const char* fixture;
    const char* error;
  };
  for (const Case& c :
       {Case{"broken_missing_file", "reference.cpp: missing (required for backend cpu; or a PyTorch reference.py)"},
        Case{"broken_unknown_key", "task.yaml: warmup: unknown key"},
        Case{"broken_no_evolve", "kernel.cpp: no [EVOLVE_START] ... [EVOLVE_END] region"},
        Case{"broken_bad_dim_value", "task.yaml: correctness.cases[1].H: expected a positive integer, got \"abc\""}}) {
    INFO(c.fixture);
    JobOutcome out = handler.handle(job_for(request(c.fixture)));
    CHECK(out.outcome == Outcome::kCandidateFault);
    CHECK(out.error == c.error);
    CHECK(out.next.empty());
  }
  JobOutcome yaml = handler.handle(job_for(request("broken_bad_yaml")));
  CHECK(yaml.outcome == Outcome::kCandidateFault);
  CHECK(yaml.error.starts_with("task.yaml: line 4:"));
}

TEST_CASE("requests are checked before the package", "[ingest]") {
  IngestHandler handler({.default_budget = 5, .default_max_in_flight = 2}, nullptr);
  auto req = request("good_cpu");
  req.campaign_id = "bad:id";
  JobOutcome out = handler.handle(job_for(req));
  CHECK(out.outcome == Outcome::kCandidateFault);
  CHECK(out.error == "campaign_id must be 1-128 characters of [A-Za-z0-9_.-], got \"bad:id\"");

  req = request("good_cpu");
  req.proposer = "";
  CHECK(handler.handle(job_for(req)).error == "proposer must be a name like tuner or llm, got \"\"");

  // Negative budget / non-positive max_in_flight fall back to the configured defaults.
  req = request("good_cpu");
  req.budget = -1;
  req.max_in_flight = 0;
  auto start = handler.campaign_for(req);
  REQUIRE(start.is_ok());
  CHECK(start->budget == 5);
  CHECK(start->max_in_flight == 2);

  kiln::proto::Job garbage;
  garbage.payload.data = "junk";
  JobOutcome bad = handler.handle(garbage);
  CHECK(bad.outcome == Outcome::kCandidateFault);
  CHECK(bad.error.starts_with("ingest: cannot decode IngestRequest"));
}

// The submission is the candidate of an ingest job. Its own failure fails the job with the reason; a fault
// that is not its own is given back or dead-lettered, by the same rule as every handler.
TEST_CASE("a transient fault is given back, a permanent one dead-lettered, only the submission's refused", "[ingest]") {
  auto metrics = std::make_shared<prometheus::Registry>();
  IngestHandler handler({}, metrics);
  JobOutcome busy = handler.answer(kiln::unavailable("the package store is busy"));
  CHECK(busy.outcome == Outcome::kRetry);
  CHECK(busy.next.empty());
  JobOutcome broken = handler.answer(kiln::internal_error("no defaults configured"));
  CHECK(broken.outcome == Outcome::kDeadLetter);
  CHECK(broken.next.empty());
  JobOutcome too_big = handler.answer(kiln::resource_exhausted("package is larger than 64 MiB"));
  CHECK(too_big.outcome == Outcome::kCandidateFault);
  CHECK(too_big.error == "package is larger than 64 MiB");
  CHECK(too_big.next.empty());
  JobOutcome invalid = handler.handle(job_for(request("broken_unknown_key")));
  CHECK(invalid.outcome == Outcome::kCandidateFault);
  CHECK(invalid.next.empty());
  // Only the submission's own failures count as rejected.
  const std::string text = prometheus::TextSerializer().Serialize(metrics->Collect());
  CHECK(text.find("kiln_tasks_ingested_total{outcome=\"rejected\"} 2") != std::string::npos);
  // On the wire both end the job as "failed", which `kiln submit` reports.
  CHECK(kiln::messaging::to_result(job_for(request("good_cpu")), invalid).outcome == "failed");
}

TEST_CASE("make_ingest_handlers takes its defaults from the scorer config", "[ingest]") {
  kiln::config::KilnConfig config;
  config.scorer.default_budget = 11;
  kiln::service::ServiceContext ctx;
  ctx.config = &config;
  auto handlers = kiln::task_ingest::make_ingest_handlers(ctx);
  REQUIRE(handlers.is_ok());
  CHECK(handlers->service == "ingest");
  auto req = request("good_cpu");
  req.budget = -1;
  JobOutcome out = handlers->job(job_for(req));
  REQUIRE(out.outcome == Outcome::kDone);
  auto start = kiln::proto::decode<kiln::proto::CampaignStart>(out.payload);
  REQUIRE(start.is_ok());
  CHECK(start->budget == 11);
}
