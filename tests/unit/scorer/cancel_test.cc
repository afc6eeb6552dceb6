// `kiln cancel`: a campaign.cancel job stops a campaign's proposals; what is in flight still finishes. And
// a campaign whose proposals were not evaluated says why in its info.
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
  TempDir dir{"kiln-cancel-test"};
  std::unique_ptr<scorer::CampaignEngine> engine;

  Engine() {
    auto e = scorer::CampaignEngine::open(dir.path() + "/archive.db");
    REQUIRE(e.is_ok());
    engine = std::move(e).value();
  }
  scorer::Handled handle(const std::string& job_id, const std::string& payload) {
    auto h = engine->handle_job(job_id, payload);
    INFO(job_id << ": " << (h.is_ok() ? h->answer.error : h.status().message()));
    REQUIRE(h.is_ok());
    return std::move(h).value();
  }
  proto::CampaignInfo info(const std::string& id) {
    auto i = engine->campaign(id);
    REQUIRE(i.is_ok());
    return std::move(i).value();
  }
  scorer::Handled cancel(const std::string& id) {
    proto::CampaignCancel msg;
    msg.campaign_id = id;
    return handle(proto::job_id::campaign_cancel(id), proto::encode(msg));
  }
  // The result of program `id` ("c1/p2"): correct and a little faster than the reference.
  scorer::Handled score(const std::string& id) {
    proto::Candidate c;
    c.campaign_id = "c1";
    c.program_id = id;
    return handle(id + ":score", proto::encode(correct(c, 1.0, 0.9, 1.1)));
  }
};

}  // namespace

TEST_CASE("a cancelled campaign proposes no more and is done once what is in flight comes back",
          "[scorer][engine][cancel]") {
  Engine e;
  scorer::Handled start = e.handle("campaign:c1:start", proto::encode(campaign_start("c1", 10, 2)));
  REQUIRE(start.answer.next.size() == 3);  // p0 compile + p1, p2 propose

  scorer::Handled cancelled = e.cancel("c1");
  CHECK(cancelled.answer.next.empty());
  auto answered = proto::decode<proto::CampaignInfo>(cancelled.answer.payload);
  REQUIRE(answered.is_ok());
  CHECK(answered->stop_reason == "cancelled");
  CHECK(answered->state == "running");  // three programs still in flight
  CHECK(answered->in_flight == 3);

  // The programs in flight are scored, and nothing new is proposed in their place.
  for (const char* id : {"c1/p0", "c1/p1", "c1/p2"}) CHECK(e.score(id).answer.next.empty());
  proto::CampaignInfo info = e.info("c1");
  CHECK(info.state == "done");
  CHECK(info.proposed == 2);
  CHECK(info.scored == 3);
  CHECK(info.stop_reason == "cancelled");

  // Cancelling again (a done campaign) changes nothing; an unknown campaign is not found.
  CHECK(e.cancel("c1").answer.next.empty());
  CHECK(e.info("c1").stop_reason == "cancelled");
  proto::CampaignCancel unknown;
  unknown.campaign_id = "nope";
  auto refused = e.engine->handle_job(proto::job_id::campaign_cancel("nope"), proto::encode(unknown));
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().code() == StatusCode::kNotFound);
}

TEST_CASE("a campaign's info says why its latest unevaluated program was not evaluated", "[scorer][engine]") {
  Engine e;
  scorer::Handled start = e.handle("campaign:c1:start", proto::encode(campaign_start("c1", 1, 2)));
  REQUIRE(start.answer.next.size() == 2);  // p0 compile + p1 propose
  CHECK(e.info("c1").last_not_evaluated.empty());

  proto::DeadLetter dead;
  dead.job_id = start.answer.next[1].job_id;
  dead.service = "propose";
  dead.attempts = 3;
  dead.reason = "worker asked to retry: propose: LLM unavailable: Connection";
  dead.worker_retry = true;
  dead.payload = start.answer.next[1].payload;
  e.handle(proto::job_id::dead_letter(dead.job_id), proto::encode(dead));

  proto::CampaignInfo info = e.info("c1");
  CHECK(info.not_evaluated == 1);
  CHECK(info.last_not_evaluated ==
        "not evaluated: worker asked to retry: propose: LLM unavailable: Connection (dead after 3 attempts)");
}
