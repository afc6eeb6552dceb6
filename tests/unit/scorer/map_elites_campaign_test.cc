// The campaign engine around MAP-Elites: a restart resumes the same search, early stop, and proposals
// routed by proposer with the archive's choices.
#include <catch2/catch.hpp>

#include <functional>
#include <set>

#include "kiln/testing/campaign_fixtures.h"
#include "kiln/core/files.h"
#include "kiln/scorer/engine.h"

using namespace kiln;
using namespace kiln::scorer;
using kiln::testing::correct;
using kiln::testing::Driver;

namespace {

struct EngineCampaign {
  TempDir dir{"kiln-map-elites"};
  std::unique_ptr<CampaignEngine> engine;
  EngineOptions options;
  std::function<proto::ScoreResult(const proto::Candidate&, bool)> test = [](const proto::Candidate& c, bool) {
    return correct(c, 1.0 + 0.01 * static_cast<double>(c.proposal_index), 0.9, 1.1);
  };
  Driver driver{[this](const std::string& id, const std::string& payload) {
                  auto h = engine->handle_job(id, payload);
                  REQUIRE(h.is_ok());
                  INFO(id << ": " << h->answer.error);
                  CHECK(h->answer.outcome == messaging::Outcome::kDone);
                  return h->answer.next;
                },
                [this](const proto::Candidate& c, bool confirm) { return test(c, confirm); }};

  void open() {
    engine.reset();
    auto e = CampaignEngine::open(dir.path() + "/archive.db", options);
    REQUIRE(e.is_ok());
    engine = std::move(e).value();
  }
  proto::CampaignInfo info(const std::string& id) {
    auto i = engine->campaign(id);
    REQUIRE(i.is_ok());
    return *i;
  }
};

}  // namespace

TEST_CASE("a scorer restarted mid-campaign resumes without re-seeding or duplicates", "[scorer][map_elites]") {
  // The same campaign twice: straight through, and with the engine closed and reopened half-way.
  auto run = [](bool restart) {
    EngineCampaign c;
    c.open();
    c.driver.submit("c1:start", proto::encode(kiln::testing::campaign_start("c1", 10, 2)));
    c.driver.run(12);
    if (restart) {
      auto before = c.info("c1");
      c.open();
      auto after = c.info("c1");
      CHECK(after.proposed == before.proposed);
      CHECK(after.scored == before.scored);
      CHECK(after.cells_filled == before.cells_filled);
      // A start redelivered after the restart is answered from the table, not re-seeded.
      auto again = c.engine->handle_job("c1:start", proto::encode(kiln::testing::campaign_start("c1", 10, 2)));
      REQUIRE(again.is_ok());
      CHECK(again->replayed);
    }
    c.driver.run();
    REQUIRE(c.driver.idle());
    auto info = c.info("c1");
    CHECK(info.state == "done");
    CHECK(info.proposed == 10);
    CHECK(info.scored == 11);
    std::vector<std::string> trace;
    for (const auto& f : c.driver.trace.followups) trace.push_back(f.job_id + "|" + f.payload.data);
    return trace;
  };
  auto straight = run(false);
  auto resumed = run(true);
  CHECK(straight == resumed);  // same parents, same inspirations, same jobs
  std::set<std::string> ids(straight.begin(), straight.end());
  CHECK(ids.size() == straight.size());
}

TEST_CASE("a campaign stops early at the target speedup", "[scorer][map_elites]") {
  EngineCampaign c;
  c.options.target_speedup = 1.5;
  c.open();
  c.test = [](const proto::Candidate& cand, bool) {
    return correct(cand, cand.proposal_index >= 3 ? 1.6 : 1.05, 1.0, 1.7);
  };
  c.driver.submit("c1:start", proto::encode(kiln::testing::campaign_start("c1", 20, 2)));
  c.driver.run();
  REQUIRE(c.driver.idle());
  auto info = c.info("c1");
  CHECK(info.state == "done");
  CHECK(info.stop_reason.find("target speedup 1.5x reached") == 0);
  CHECK(info.proposed < 20);
  CHECK(info.proposed >= 3);
}

TEST_CASE("a campaign stops after N proposals without improvement", "[scorer][map_elites]") {
  EngineCampaign c;
  c.open();
  c.test = [](const proto::Candidate& cand, bool) {
    return correct(cand, cand.proposal_index == 1 ? 1.05 : 1.01, 1.0, 1.1);
  };
  auto start = kiln::testing::campaign_start("c1", 30, 1);
  start.patience = 4;
  c.driver.submit("c1:start", proto::encode(start));
  c.driver.run();
  REQUIRE(c.driver.idle());
  auto info = c.info("c1");
  CHECK(info.state == "done");
  CHECK(info.stop_reason == "no improvement in 4 proposals");
  CHECK(info.proposed == 5);  // p1 is the best; p2..p5 fail to beat it
}

TEST_CASE("proposals carry the archive's choices and are routed by proposer", "[scorer][map_elites]") {
  EngineCampaign c;
  c.open();
  auto start = kiln::testing::campaign_start("c1", 6, 2);
  start.proposer = "external";
  auto started = c.engine->handle_job("c1:start", proto::encode(start));
  REQUIRE(started.is_ok());
  // An external agent writes from program 0's result, so it is asked once that result is in.
  REQUIRE(started->answer.next.size() == 1);
  auto p0 = kiln::testing::decode_or_die<proto::CompileRequest>(started->answer.next[0].payload.data).cand;
  auto h = c.engine->handle_job("c1/p0:score", proto::encode(kiln::testing::correct(p0, 1.0, 0.9, 1.1)));
  REQUIRE(h.is_ok());
  std::set<std::string> services;
  for (const auto& f : h->answer.next) services.insert(f.service);
  CHECK(services == std::set<std::string>{"propose.external"});
  CHECK(proposal_service_for("llm") == "propose");
  CHECK(proposal_service_for("tuner") == "propose");

  for (const auto& f : h->answer.next) {
    if (f.service != "propose.external") continue;
    auto req = kiln::testing::decode_or_die<proto::ProposalRequest>(f.payload.data);
    CHECK(req.island == req.proposal_index - 1);
    CHECK_FALSE(req.target_cell.empty());
    CHECK(req.strategy.prompt_id.empty());  // strategies are for llm campaigns
  }
}
