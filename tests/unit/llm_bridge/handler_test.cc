#include "kiln/llm_bridge/handler.h"

#include <catch2/catch.hpp>

#include "kiln/testing/campaign_fixtures.h"
#include "kiln/core/files.h"
#include "kiln/task/task.h"
#include "kiln/testing/metric_value.h"

using namespace kiln;
using kiln::testing::decode_or_die;
using kiln::testing::metric_value;

namespace {

proto::Job propose_job(const std::string& campaign, int64_t index, const std::string& proposer = "tuner",
                       proto::FileMap files = kiln::testing::task_files()) {
  proto::ProposalRequest req;
  req.parent.campaign_id = campaign;
  req.parent.program_id = campaign + "/p0";
  req.parent.code = "// parent code\n";
  req.program_id = campaign + "/p" + std::to_string(index);
  req.proposal_index = index;
  req.proposer = proposer;
  req.files = std::move(files);
  proto::Job job;
  job.job_id = req.program_id + ":propose";
  job.service = "propose";
  job.payload.data = proto::encode(req);
  return job;
}

}  // namespace

TEST_CASE("the propose handler parses a package once and hands it to the proposer", "[llm_bridge]") {
  llm_bridge::ProposeHandler handler({"sm_90"}, nullptr);
  handler.add("tuner", std::make_unique<llm_bridge::TunerProposer>());
  const uint64_t parses = task::parse_count();
  for (int64_t i = 1; i <= 4; ++i) {
    messaging::JobOutcome out = handler.handle(propose_job("c1", i));
    REQUIRE(out.outcome == messaging::Outcome::kDone);
    // A package that came in the job goes on in it.
    CHECK(decode_or_die<proto::CompileRequest>(out.next.at(0).payload.data).files == kiln::testing::task_files());
  }
  CHECK(task::parse_count() - parses == 1);
  // Another package is another parse.
  handler.handle(propose_job("c2", 1, "tuner", kiln::testing::task_files("cuda")));
  CHECK(task::parse_count() - parses == 2);
}

TEST_CASE("the propose handler answers with the candidate's compile job", "[llm_bridge]") {
  auto registry = std::make_shared<prometheus::Registry>();
  llm_bridge::ProposeHandler handler({"sm_90"}, registry);
  handler.add("tuner", std::make_unique<llm_bridge::TunerProposer>());

  proto::Job job = propose_job("c1", 1);
  auto proposal = decode_or_die<proto::ProposalRequest>(job.payload.data);
  proposal.screen_below = 3.25;   // the campaign's screening bar, carried to the test job
  proposal.want_profile = false;  // and whether its proposer reads profiles
  job.payload.data = proto::encode(proposal);
  messaging::JobOutcome out = handler.handle(job);
  REQUIRE(out.outcome == messaging::Outcome::kDone);
  REQUIRE(out.next.size() == 1);
  CHECK(out.next[0].service == "compile");
  CHECK(out.next[0].job_id == "c1/p1:compile");
  auto req = decode_or_die<proto::CompileRequest>(out.next[0].payload.data);
  CHECK(req.cand.program_id == "c1/p1");
  CHECK(req.cand.campaign_id == "c1");
  CHECK(req.cand.code == "// parent code\n");
  CHECK(req.cand.params.size() == 2);
  CHECK(req.backend == proto::Backend::kCpu);
  CHECK(req.arch == "native");
  CHECK(req.files.count("task.yaml"));
  CHECK(req.screen_below == 3.25);
  CHECK_FALSE(req.want_profile);

  SECTION("CUDA tasks compile for the configured arch") {
    messaging::JobOutcome cuda = handler.handle(propose_job("c2", 1, "tuner", kiln::testing::task_files("cuda")));
    auto creq = decode_or_die<proto::CompileRequest>(cuda.next.at(0).payload.data);
    CHECK(creq.backend == proto::Backend::kCuda);
    CHECK(creq.arch == "sm_90");
  }
  SECTION("an exhausted space ends the candidate with a propose-stage score") {
    messaging::JobOutcome gone = handler.handle(propose_job("c1", 9));
    CHECK(gone.outcome == messaging::Outcome::kCandidateFault);
    REQUIRE(gone.next.size() == 1);
    CHECK(gone.next[0].service == "score");
    CHECK(gone.next[0].job_id == "c1/p9:score");
    auto r = decode_or_die<proto::ScoreResult>(gone.next[0].payload.data);
    CHECK(r.kind == "result");
    CHECK(r.stage == proto::Stage::kPropose);
    CHECK(r.error.find("parameter space exhausted") == 0);
    CHECK(r.cand.program_id == "c1/p9");
    CHECK(r.cand.campaign_id == "c1");
    CHECK(r.cand.parent_id == "c1/p0");
    CHECK(r.cand.proposal_index == 9);
    CHECK(metric_value(*registry, "kiln_llm_requests_total", {{"model", "tuner"}, {"outcome", "error"}}) == 1);
  }
  SECTION("an unknown proposer is dead-lettered, not scored and not stuck") {
    messaging::JobOutcome llm = handler.handle(propose_job("c1", 2, "llm"));
    CHECK(llm.outcome == messaging::Outcome::kDeadLetter);
    CHECK(llm.next.empty());  // the dead letter (added on the wire) ends the candidate as not evaluated
    CHECK(llm.error == "propose: proposer 'llm' is not available");
    CHECK(metric_value(*registry, "kiln_llm_requests_total", {{"model", "unknown"}, {"outcome", "error"}}) == 1);
  }
  SECTION("an invalid package is no fault of the proposal: dead-lettered") {
    proto::FileMap broken = kiln::testing::task_files();
    broken.erase("kernel.cpp");
    messaging::JobOutcome bad = handler.handle(propose_job("c1", 2, "tuner", broken));
    CHECK(bad.outcome == messaging::Outcome::kDeadLetter);
    CHECK(bad.next.empty());
    CHECK(bad.error.rfind("propose: task package: ", 0) == 0);
    CHECK(bad.error.find("kernel.cpp") != std::string::npos);
  }
  SECTION("a malformed payload is dead-lettered without follow-ups") {
    proto::Job junk;
    junk.job_id = "x:propose";
    junk.payload.data = "\xc1 not msgpack";
    messaging::JobOutcome failed = handler.handle(junk);
    CHECK(failed.outcome == messaging::Outcome::kDeadLetter);
    CHECK(failed.next.empty());
    CHECK_FALSE(failed.error.empty());
  }
  CHECK(metric_value(*registry, "kiln_llm_requests_total", {{"model", "tuner"}, {"outcome", "ok"}}) >= 1);
}

namespace {

// A proposer that fails as it is told to, once per proposal.
class ScriptedProposer final : public llm_bridge::Proposer {
 public:
  explicit ScriptedProposer(std::vector<Status> script) : script_(std::move(script)) {}
  std::string model() const override { return "scripted"; }
  Result<proto::Candidate> propose(const proto::ProposalRequest& req, const service::TaskPackage&) override {
    Status next = script_.at(calls_++);
    if (!next.is_ok()) return next;
    proto::Candidate c;
    c.program_id = req.program_id;
    c.code = req.parent.code;
    return c;
  }

 private:
  std::vector<Status> script_;
  size_t calls_ = 0;
};

}  // namespace

// The three kinds of fault, each with its one outcome: only the proposal's own is scored against it.
TEST_CASE("a transient fault is given back, a permanent one dead-lettered, only the proposal's scored",
          "[llm_bridge]") {
  auto registry = std::make_shared<prometheus::Registry>();
  llm_bridge::ProposeHandler handler({"sm_90"}, registry);
  handler.add("scripted", std::make_unique<ScriptedProposer>(std::vector<Status>{
                              unavailable("POST /chat/completions: rate limited (429)"),
                              Status::ok(),
                              permission_denied("POST /chat/completions: HTTP 401: bad key"),
                              invalid_argument("no fenced code block in the reply"),
                          }));
  const proto::Job job = propose_job("c1", 1, "scripted");

  messaging::JobOutcome limited = handler.handle(job);
  CHECK(limited.outcome == messaging::Outcome::kRetry);
  CHECK(limited.next.empty());
  CHECK(limited.error == "propose: POST /chat/completions: rate limited (429)");
  messaging::JobOutcome again = handler.handle(job);  // given back, attempted again
  CHECK(again.outcome == messaging::Outcome::kDone);
  REQUIRE(again.next.size() == 1);
  CHECK(again.next[0].service == "compile");

  messaging::JobOutcome refused = handler.handle(propose_job("c1", 2, "scripted"));
  CHECK(refused.outcome == messaging::Outcome::kDeadLetter);
  CHECK(refused.next.empty());

  messaging::JobOutcome prose = handler.handle(propose_job("c1", 3, "scripted"));
  CHECK(prose.outcome == messaging::Outcome::kCandidateFault);
  REQUIRE(prose.next.size() == 1);
  CHECK(prose.next[0].service == "score");
  auto r = decode_or_die<proto::ScoreResult>(prose.next[0].payload.data);
  CHECK(r.stage == proto::Stage::kPropose);  // scored as no code
  CHECK(r.error == "no fenced code block in the reply");
  CHECK(metric_value(*registry, "kiln_llm_requests_total", {{"model", "scripted"}, {"outcome", "error"}}) == 3);
}

TEST_CASE("make_propose_handlers wires the tuner with slots and arch from the config", "[llm_bridge]") {
  config::KilnConfig cfg;
  cfg.llm_bridge.slots = 3;
  cfg.compiler.cuda_arch = "sm_80";
  TempDir dir("kiln-propose-test");
  service::ServiceContext ctx;
  ctx.config = &cfg;
  ctx.state_dir = dir.path();
  ctx.worker_id = "w1";
  ctx.metrics = std::make_shared<prometheus::Registry>();

  auto h = llm_bridge::make_propose_handlers(ctx);
  REQUIRE(h.is_ok());
  CHECK(h->slots == 3);
  CHECK(h->service == "propose");
  REQUIRE(h->job);
  messaging::JobOutcome out = h->job(propose_job("c1", 1, "tuner", kiln::testing::task_files("cuda")));
  auto req = decode_or_die<proto::CompileRequest>(out.next.at(0).payload.data);
  CHECK(req.arch == "sm_80");
  CHECK(metric_value(*ctx.metrics, "kiln_llm_requests_total", {{"model", "tuner"}, {"outcome", "ok"}}) == 1);
}
