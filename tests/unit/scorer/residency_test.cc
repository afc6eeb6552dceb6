// What the scorer keeps in memory follows the campaigns that run, not its history: a campaign's archive
// and parsed task leave memory when it ends, and `kiln status` (a query of every campaign) brings none of
// the ended ones back. Their figures are still answered from the store.
#include <catch2/catch.hpp>

#include "kiln/core/files.h"
#include "kiln/proto/codec.h"
#include "kiln/proto/ids.h"
#include "kiln/scorer/engine.h"
#include "kiln/testing/campaign_fixtures.h"

using namespace kiln;
using kiln::testing::campaign_start;
using kiln::testing::correct;

namespace {

struct Engine {
  TempDir dir{"kiln-residency-test"};
  std::unique_ptr<scorer::CampaignEngine> engine;

  Engine() {
    auto e = scorer::CampaignEngine::open(dir.path() + "/archive.db");
    REQUIRE(e.is_ok());
    engine = std::move(e).value();
  }
  void handle(const std::string& job_id, const std::string& payload) {
    auto h = engine->handle_job(job_id, payload);
    INFO(job_id << ": " << (h.is_ok() ? h->answer.error : h.status().message()));
    REQUIRE(h.is_ok());
  }
  void start(const std::string& id) {
    handle(proto::job_id::campaign_start(id), proto::encode(campaign_start(id, 2, 2)));
  }
  // Program `n` of campaign `cid`, correct and no faster than the reference (nothing to promote).
  void score(const std::string& cid, int n) {
    proto::Candidate c;
    c.campaign_id = cid;
    c.program_id = cid + "/p" + std::to_string(n);
    handle(c.program_id + ":score", proto::encode(correct(c, 1.0, 0.9, 1.1)));
  }
  proto::CampaignInfo info(const std::string& id) {
    auto i = engine->campaign(id);
    REQUIRE(i.is_ok());
    return std::move(i).value();
  }
};

}  // namespace

TEST_CASE("scorer: a campaign's archive and task leave memory when it ends", "[scorer][engine][residency]") {
  Engine e;
  for (int k = 0; k < 6; ++k) {
    const std::string cid = "old" + std::to_string(k);
    e.start(cid);
    for (int n = 0; n <= 2; ++n) e.score(cid, n);  // program 0 and the budget of 2
    REQUIRE(e.info(cid).state == "done");
  }
  auto ended = e.engine->resident();
  CHECK(ended.archives == 0);
  CHECK(ended.programs == 0);
  CHECK(ended.specs == 0);

  e.start("live");
  e.score("live", 0);
  e.score("live", 1);
  auto running = e.engine->resident();
  CHECK(running.archives == 1);
  CHECK(running.programs >= 1);  // the elites of its archive
  CHECK(running.specs == 1);

  // Listing every campaign (kiln status) answers for the ended ones from the store and keeps none of them.
  auto all = e.engine->campaigns(proto::CampaignQuery{});
  REQUIRE(all.is_ok());
  CHECK(all->campaigns.size() == 7);
  for (const auto& c : all->campaigns) CHECK(c.cells_filled >= 1);
  CHECK(e.engine->resident().archives == 1);
  CHECK(e.engine->resident().programs == running.programs);

  // The last one ends too: nothing is left.
  e.score("live", 2);
  CHECK(e.info("live").state == "done");
  CHECK(e.engine->resident().archives == 0);
  CHECK(e.engine->resident().specs == 0);
}
