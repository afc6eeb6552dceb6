// Whole campaigns through the real scorer handler and the real llm-bridge tuner; the driver fabricates
// what the compiler, tester and promoter would answer.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>

#include "kiln/testing/campaign_fixtures.h"
#include "kiln/core/files.h"
#include "kiln/llm_bridge/handler.h"
#include "kiln/scorer/handler.h"

using namespace kiln;
using kiln::testing::correct;
using kiln::testing::decode_or_die;
using kiln::testing::Driver;
using kiln::testing::test_result;

namespace {

proto::Job as_job(const std::string& service, const std::string& id, const std::string& payload) {
  proto::Job j;
  j.job_id = id;
  j.service = service;
  j.payload.data = payload;
  return j;
}

// A pretend machine: bigger blocks and wider vectors are faster; BLOCK=64 VEC=4 computes garbage.
proto::ScoreResult measure(const proto::Candidate& c, bool confirm) {
  const std::string& block = c.params.at("BLOCK");
  const std::string& vec = c.params.at("VEC");
  if (block == "64" && vec == "4") return test_result(c, proto::TestStatus::kMismatch);
  double speedup = 0.8 + 0.1 * std::log2(std::stod(block) / 64) + 0.1 * std::log2(std::stod(vec));
  if (confirm) speedup -= 0.01;
  return correct(c, speedup, speedup - 0.05, speedup + 0.05);
}

struct Campaign {
  TempDir dir{"kiln-tuned-campaign"};
  std::unique_ptr<scorer::ScorerHandler> scorer;
  llm_bridge::ProposeHandler proposer{{}, nullptr};
  Driver driver;

  Campaign()
      : driver(
            [this](const std::string& id, const std::string& payload) {
              messaging::JobOutcome out = scorer->handle_job(as_job("score", id, payload));
              INFO(id << ": " << out.error);
              CHECK(out.outcome == messaging::Outcome::kDone);
              return out.next;
            },
            measure) {
    auto opened = scorer::ScorerHandler::open(dir.path() + "/archive.db", {}, nullptr);
    REQUIRE(opened.is_ok());
    scorer = std::move(opened).value();
    proposer.add("tuner", std::make_unique<llm_bridge::TunerProposer>());
    driver.set_propose([this](const proto::FollowUp& f) {
      messaging::JobOutcome out = proposer.handle(as_job(f.service, f.job_id, f.payload.data));
      // A proposal, or the tuner's own failure (its space is used up) scored as no code: never given back.
      CHECK((out.outcome == messaging::Outcome::kDone || out.outcome == messaging::Outcome::kCandidateFault));
      return out.next;
    });
  }

  std::vector<proto::Program> programs(const std::string& id) {
    proto::CampaignQuery q;
    q.campaign_id = id;
    q.top = 100;
    auto best = scorer->engine().best(q);
    REQUIRE(best.is_ok());
    return best->programs;
  }
};

}  // namespace

TEST_CASE("a tuner campaign tries every combination once and promotes the fastest", "[scorer][campaign]") {
  Campaign c;
  c.driver.submit("c1:start", proto::encode(kiln::testing::campaign_start("c1", 8, 3)));
  c.driver.run();
  REQUIRE(c.driver.idle());

  auto info = c.scorer->engine().campaign("c1");
  REQUIRE(info.is_ok());
  CHECK(info->state == "done");
  CHECK(info->scored == 9);
  CHECK(info->correct == 8);
  CHECK(info->best_params == std::map<std::string, std::string>{{"BLOCK", "256"}, {"VEC", "4"}});
  CHECK(info->best_speedup == Approx(1.2));

  std::set<std::map<std::string, std::string>> combos;
  for (const auto& p : c.programs("c1")) CHECK(combos.insert(p.template_parameters).second);
  CHECK(combos.size() == 9);

  REQUIRE(c.driver.trace.promotions.size() == 1);
  CHECK(c.driver.trace.promotions[0].params == info->best_params);
  CHECK(c.driver.trace.promotions[0].confirmation.speedup == Approx(1.19));
  CHECK(info->promoted.size() == 1);
}

TEST_CASE("a budget beyond the parameter space ends with 'no code' programs, not a stall", "[scorer][campaign]") {
  Campaign c;
  c.driver.submit("c1:start", proto::encode(kiln::testing::campaign_start("c1", 12, 4)));
  c.driver.run();
  REQUIRE(c.driver.idle());

  auto info = c.scorer->engine().campaign("c1");
  REQUIRE(info.is_ok());
  CHECK(info->state == "done");
  CHECK(info->proposed == 12);
  CHECK(info->scored == 13);
  int exhausted = 0;
  for (const auto& p : c.programs("c1")) {
    if (p.eval.perf_score != 0) continue;
    ++exhausted;
    CHECK(p.eval.eval_log.find("no code extracted: parameter space exhausted") == 0);
    CHECK(p.eval.status == "no_code");
  }
  CHECK(exhausted == 4);
}
