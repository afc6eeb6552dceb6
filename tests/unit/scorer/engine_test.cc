#include "kiln/scorer/engine.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <set>

#include "kiln/testing/campaign_fixtures.h"
#include "kiln/core/files.h"
#include "kiln/store/sqlite.h"
#include "kiln/task/task.h"

using namespace kiln;
using kiln::testing::campaign_start;
using kiln::testing::correct;
using kiln::testing::decode_or_die;
using kiln::testing::Driver;
using kiln::testing::test_result;

namespace {

// The same outcome, and the same RESULT on the wire, byte for byte.
bool same_answer(const scorer::Handled& a, const scorer::Handled& b) {
  proto::Job job;
  job.job_id = "j";
  job.service = "score";
  return a.answer.outcome == b.answer.outcome &&
         proto::encode(messaging::to_result(job, a.answer)) == proto::encode(messaging::to_result(job, b.answer));
}

struct Fixture {
  TempDir dir{"kiln-archive-test"};
  std::string db_path = dir.path() + "/archive.db";
  scorer::EngineOptions options;
  std::unique_ptr<scorer::CampaignEngine> engine;
  int64_t max_in_flight_seen = 0;

  Fixture() { reopen(); }

  void reopen() {
    engine.reset();  // closes the database first, as a process exit would
    auto e = scorer::CampaignEngine::open(db_path, options);
    REQUIRE(e.is_ok());
    engine = std::move(e).value();
  }

  scorer::Handled handle(const std::string& job_id, const std::string& payload) {
    auto h = engine->handle_job(job_id, payload);
    REQUIRE(h.is_ok());
    return std::move(h).value();
  }

  // The error a job the engine refuses ends with.
  Status refuse(const std::string& job_id, const std::string& payload) {
    auto h = engine->handle_job(job_id, payload);
    REQUIRE_FALSE(h.is_ok());
    return h.status();
  }

  proto::CampaignInfo info(const std::string& id) {
    auto i = engine->campaign(id);
    REQUIRE(i.is_ok());
    return std::move(i).value();
  }

  std::map<std::string, proto::Program> programs(const std::string& id) {
    proto::CampaignQuery q;
    q.campaign_id = id;
    q.top = 1000;
    auto best = engine->best(q);
    REQUIRE(best.is_ok());
    std::map<std::string, proto::Program> out;
    for (auto& p : best->programs) out[p.id] = p;
    return out;
  }

  // A driver whose score service is this engine; checks every answer and the in-flight bound.
  Driver driver(Driver::TestFn test, const std::string& campaign_id = "c1") {
    return Driver(
        [this, campaign_id](const std::string& job_id, const std::string& payload) {
          scorer::Handled h = handle(job_id, payload);
          INFO(job_id << ": " << h.answer.error);
          CHECK(h.answer.outcome == messaging::Outcome::kDone);
          auto i = engine->campaign(campaign_id);
          if (i.is_ok()) max_in_flight_seen = std::max(max_in_flight_seen, i->in_flight);
          return h.answer.next;
        },
        std::move(test));
  }
};

std::string start_payload(const std::string& id, int64_t budget, int64_t mif,
                          proto::FileMap files = kiln::testing::task_files()) {
  return proto::encode(campaign_start(id, budget, mif, std::move(files)));
}

// Slow, correct kernels: below the promotion bar, so no confirmation traffic.
proto::ScoreResult plain(const proto::Candidate& c, bool) {
  return correct(c, 1.0 + 0.01 * static_cast<double>(c.proposal_index), 0.99, 1.2);
}

// The broker's dead letter for `job` after 3 attempts; `worker_retry`: its last worker gave it back.
std::string dead_letter(const proto::FollowUp& job, const std::string& service, const std::string& reason,
                        bool worker_retry) {
  proto::DeadLetter d;
  d.job_id = job.job_id;
  d.service = service;
  d.attempts = 3;
  d.reason = reason;
  d.worker_retry = worker_retry;
  d.payload = job.payload;
  return proto::encode(d);
}

std::vector<std::string> job_ids(const std::vector<proto::FollowUp>& fs, const std::string& service) {
  std::vector<std::string> ids;
  for (const auto& f : fs)
    if (f.service == service) ids.push_back(f.job_id);
  return ids;
}

}  // namespace

TEST_CASE("a campaign starts with program 0 and the first wave of proposals", "[scorer][engine]") {
  Fixture f;
  scorer::Handled h = f.handle("c1:start", start_payload("c1", 6, 2));
  REQUIRE(h.answer.outcome == messaging::Outcome::kDone);
  REQUIRE(h.answer.next.size() == 3);

  const auto& compile = h.answer.next[0];
  CHECK(compile.service == "compile");
  CHECK(compile.job_id == "c1/p0:compile");
  auto creq = decode_or_die<proto::CompileRequest>(compile.payload.data);
  CHECK(creq.cand.program_id == "c1/p0");
  CHECK(creq.cand.campaign_id == "c1");
  CHECK(creq.cand.generation == 0);
  CHECK(creq.cand.params == std::map<std::string, std::string>{{"BLOCK", "64"}, {"VEC", "1"}});
  CHECK(creq.cand.code == kiln::testing::task_files().at("kernel.cpp").data);
  CHECK(creq.backend == proto::Backend::kCpu);
  CHECK(creq.arch == "native");
  CHECK(creq.files.count("task.yaml"));

  for (int i = 1; i <= 2; ++i) {
    const auto& p = h.answer.next[static_cast<size_t>(i)];
    CHECK(p.service == "propose");
    CHECK(p.job_id == "c1/p" + std::to_string(i) + ":propose");
    auto req = decode_or_die<proto::ProposalRequest>(p.payload.data);
    CHECK(req.program_id == "c1/p" + std::to_string(i));
    CHECK(req.proposal_index == i);
    CHECK(req.parent.program_id == "c1/p0");
    CHECK(req.parent.code == creq.cand.code);
    CHECK(req.proposer == "tuner");
    CHECK(req.seed >= 0);
    CHECK(req.files.count("kernel.cpp"));
  }

  auto started = decode_or_die<proto::CampaignInfo>(h.answer.payload);
  CHECK(started.campaign_id == "c1");
  proto::CampaignInfo info = f.info("c1");
  CHECK(info.state == "running");
  CHECK(info.budget == 6);
  CHECK(info.proposed == 2);
  CHECK(info.in_flight == 3);
  CHECK(info.scored == 0);
  CHECK(info.backend == proto::Backend::kCpu);
  CHECK(info.task_name == "scale_test");

  SECTION("a CUDA task compiles for the configured arch") {
    f.handle("c2:start", start_payload("c2", 1, 1, kiln::testing::task_files("cuda")));
    auto req = f.engine->campaign("c2");
    REQUIRE(req.is_ok());
    CHECK(req->backend == proto::Backend::kCuda);
  }
  SECTION("budget 0 runs program 0 alone") {
    scorer::Handled h0 = f.handle("c3:start", start_payload("c3", 0, 4));
    REQUIRE(h0.answer.next.size() == 1);
    auto c = decode_or_die<proto::CompileRequest>(h0.answer.next[0].payload.data);
    scorer::Handled done = f.handle("c3/p0:score", proto::encode(correct(c.cand, 1.0, 1.0, 1.0)));
    CHECK(done.answer.next.empty());
    CHECK(f.info("c3").state == "done");
    CHECK(f.info("c3").finished_at > 0);
  }
}

TEST_CASE("a CUDA campaign asks for the configured arch", "[scorer][engine]") {
  Fixture f;
  f.options.cuda_arch = "sm_100";
  f.reopen();
  scorer::Handled h = f.handle("g:start", start_payload("g", 1, 1, kiln::testing::task_files("cuda")));
  auto creq = decode_or_die<proto::CompileRequest>(h.answer.next.at(0).payload.data);
  CHECK(creq.arch == "sm_100");
  CHECK(creq.backend == proto::Backend::kCuda);
  CHECK(creq.cand.code == kiln::testing::task_files("cuda").at("kernel.cu").data);
}

TEST_CASE("a whole campaign honours its budget and in-flight bound", "[scorer][engine]") {
  Fixture f;
  const int64_t budget = 12, mif = 3;
  Driver d = f.driver([](const proto::Candidate& c, bool confirm) {
    // Every third proposal is wrong, the rest are correct and slightly faster each time.
    if (c.proposal_index % 3 == 0) return test_result(c, proto::TestStatus::kMismatch);
    return plain(c, confirm);
  });
  d.submit("c1:start", start_payload("c1", budget, mif));
  d.run();
  REQUIRE(d.idle());

  proto::CampaignInfo info = f.info("c1");
  CHECK(info.state == "done");
  CHECK(info.proposed == budget);
  CHECK(info.scored == budget + 1);
  CHECK(info.in_flight == 0);
  CHECK(info.finished_at >= info.started_at);
  CHECK(f.max_in_flight_seen <= mif + 1);

  auto proposals = job_ids(d.trace.followups, "propose");
  CHECK(proposals.size() == static_cast<size_t>(budget));
  CHECK(std::set<std::string>(proposals.begin(), proposals.end()).size() == proposals.size());
  CHECK(job_ids(d.trace.followups, "promote").empty());

  // The best is the fastest correct one: p11 (index 12 is a multiple of 3, so wrong; so are 0, 3, 6, 9).
  CHECK(info.best_program_id == "c1/p11");
  CHECK(info.best_speedup == Approx(1.11));
  CHECK(info.correct == 8);

  auto programs = f.programs("c1");
  REQUIRE(programs.size() == static_cast<size_t>(budget + 1));
  CHECK(programs["c1/p0"].is_program0);
  CHECK(programs["c1/p3"].eval.perf_score == 4);
  CHECK(programs["c1/p4"].eval.perf_score == 5);
  CHECK(programs["c1/p4"].generation >= 1);
  CHECK_FALSE(programs["c1/p4"].parent_id.empty());
  CHECK(programs["c1/p4"].template_parameters.at("BLOCK") == "256");
  CHECK_FALSE(programs["c1/p4"].eval.eval_log.empty());
}

TEST_CASE("parents come from the archive once programs are scored", "[scorer][engine]") {
  Fixture f;
  Driver d = f.driver(plain);
  d.submit("c1:start", start_payload("c1", 10, 1));
  d.run();
  // With one in flight, every proposal after the first waits for a score; later ones pick scored parents.
  std::set<std::string> parents;
  for (const auto& fu : d.trace.followups) {
    if (fu.service != "propose") continue;
    auto req = decode_or_die<proto::ProposalRequest>(fu.payload.data);
    parents.insert(req.parent.program_id);
    if (req.parent.program_id != "c1/p0") {
      CHECK_FALSE(req.parent_eval_log.empty());
      CHECK(req.parent.generation >= 1);
    }
  }
  CHECK(parents.size() > 1);
}

TEST_CASE("proposals carry the campaign best's lowest lower bound as the screening bar, confirmations none",
          "[scorer][engine]") {
  Fixture f;
  // Each candidate faster than the last: the best, and with it the bar, rises as the campaign goes.
  Driver d = f.driver([&](const proto::Candidate& c, bool) {
    const double x = 1.0 + 0.25 * static_cast<double>(c.proposal_index);
    return correct(c, x, x - 0.1, x + 0.1);
  });
  d.submit("c1:start", start_payload("c1", 6, 1));
  d.run();
  std::vector<double> bars;
  for (const auto& fu : d.trace.followups) {
    if (fu.service == "propose") bars.push_back(decode_or_die<proto::ProposalRequest>(fu.payload.data).screen_below);
    if (fu.service == "compile" && fu.job_id.find("confirm") != std::string::npos)
      CHECK(decode_or_die<proto::CompileRequest>(fu.payload.data).screen_below == 0);
  }
  REQUIRE(bars.size() == 6);
  CHECK(bars.front() == 0);  // nothing was scored yet
  for (size_t i = 1; i < bars.size(); ++i) {
    CHECK(bars[i] >= bars[i - 1]);
    // Always some scored program's lower bound: 0.9 (program 0), 1.15, 1.4, ...
    const double k = (bars[i] - 0.9) / 0.25;
    CHECK(k == Approx(std::round(k)).margin(1e-9));
  }
  // With one in flight, each proposal after the first is issued once the one before it is scored: proposal 6
  // gets proposal 5's lower bound.
  CHECK(bars.back() == Approx(2.15));

  // Off: no proposal carries a bar.
  Fixture off;
  off.options.screen_by_best = false;
  off.reopen();
  Driver d2 = off.driver([&](const proto::Candidate& c, bool) { return correct(c, 2.0, 1.9, 2.1); });
  d2.submit("c1:start", start_payload("c1", 3, 1));
  d2.run();
  for (const auto& fu : d2.trace.followups) {
    if (fu.service == "propose") CHECK(decode_or_die<proto::ProposalRequest>(fu.payload.data).screen_below == 0);
  }
}

TEST_CASE("a tuner campaign's jobs ask for no profile, an LLM campaign's do", "[scorer][engine]") {
  for (const std::string proposer : {"tuner", "llm"}) {
    Fixture f;
    Driver d = f.driver([&](const proto::Candidate& c, bool) {
      const double x = 1.0 + 0.25 * static_cast<double>(c.proposal_index);
      return correct(c, x, x - 0.1, x + 0.1);
    });
    proto::CampaignStart start = campaign_start("c1", 3, 1, kiln::testing::task_files());
    start.proposer = proposer;
    d.submit("c1:start", proto::encode(start));
    d.run();
    const bool wanted = proposer != "tuner";
    size_t proposals = 0, compiles = 0, confirmations = 0;
    for (const auto& fu : d.trace.followups) {
      INFO(proposer << ": " << fu.job_id);
      if (fu.service == "propose") {
        ++proposals;
        CHECK(decode_or_die<proto::ProposalRequest>(fu.payload.data).want_profile == wanted);
      }
      // The scorer's own compile jobs: program 0's and the confirmations' (the others are the test's bridge's).
      const bool confirm = fu.job_id.find("confirm") != std::string::npos;
      if (fu.service == "compile" && (fu.job_id == "c1/p0:compile" || confirm)) {
        ++compiles;
        if (confirm) ++confirmations;
        CHECK(decode_or_die<proto::CompileRequest>(fu.payload.data).want_profile == wanted);
      }
    }
    CHECK(proposals == 3);
    CHECK(compiles >= 2);  // program 0 and at least one confirmation of a new best
    CHECK(confirmations >= 1);
  }
}

TEST_CASE("an LLM campaign proposes from evaluated parents only: its first wave waits for program 0's result",
          "[scorer][engine]") {
  for (const bool p0_builds : {true, false}) {
    Fixture f;
    proto::CampaignStart start = campaign_start("c1", 6, 3, kiln::testing::task_files());
    start.proposer = "llm";
    scorer::Handled h = f.handle("c1:start", proto::encode(start));
    REQUIRE(h.answer.next.size() == 1);  // program 0's compile, and no proposal written blind
    CHECK(h.answer.next[0].service == "compile");
    CHECK(f.info("c1").proposed == 0);
    auto p0 = decode_or_die<proto::CompileRequest>(h.answer.next[0].payload.data).cand;
    const proto::ScoreResult result =
        p0_builds ? correct(p0, 1.0, 0.9, 1.1) : kiln::testing::build_failed(p0, "kernel.cpp:3: error: expected ';'");
    scorer::Handled scored = f.handle("c1/p0:score", proto::encode(result));
    const auto proposals = job_ids(scored.answer.next, "propose");
    INFO("program 0 builds: " << p0_builds);
    CHECK(proposals.size() == 3);  // the whole first wave at once, each with program 0's result
    for (const auto& fu : scored.answer.next) {
      if (fu.service != "propose") continue;
      auto req = decode_or_die<proto::ProposalRequest>(fu.payload.data);
      CHECK(req.parent.program_id == "c1/p0");
      CHECK_FALSE(req.parent_eval_log.empty());
      if (!p0_builds) CHECK(req.parent_eval_log.find("expected ';'") != std::string::npos);
    }
  }
}

TEST_CASE("jobs are handled exactly once", "[scorer][engine]") {
  Fixture f;
  scorer::Handled start = f.handle("c1:start", start_payload("c1", 4, 2));
  auto p0 = decode_or_die<proto::CompileRequest>(start.answer.next[0].payload.data).cand;
  const std::string result = proto::encode(correct(p0, 1.0, 0.9, 1.1));

  scorer::Handled first = f.handle("c1/p0:score", result);
  CHECK_FALSE(first.replayed);
  proto::CampaignInfo after_first = f.info("c1");
  CHECK(after_first.scored == 1);

  SECTION("a redelivered job gets the identical answer and changes nothing") {
    scorer::Handled again = f.handle("c1/p0:score", result);
    CHECK(again.replayed);
    CHECK(same_answer(again, first));
    scorer::Handled start_again = f.handle("c1:start", start_payload("c1", 4, 2));
    CHECK(start_again.replayed);
    CHECK(same_answer(start_again, start));
    proto::CampaignInfo info = f.info("c1");
    CHECK(info.scored == after_first.scored);
    CHECK(info.proposed == after_first.proposed);
    CHECK(*f.engine->duplicates_ignored() == 0);
  }
  SECTION("a second result for a scored program is ignored and counted") {
    scorer::Handled dup = f.handle("c1/p0:score-late", proto::encode(test_result(p0, proto::TestStatus::kCrashed)));
    CHECK(dup.duplicate);
    CHECK(dup.answer.outcome == messaging::Outcome::kDone);
    CHECK(dup.answer.next.empty());
    CHECK(f.info("c1").scored == 1);
    CHECK(f.programs("c1").at("c1/p0").eval.perf_score == 5);  // the first score stands
    CHECK(*f.engine->duplicates_ignored() == 1);
  }
  SECTION("the same campaign started under another job id is not started twice") {
    scorer::Handled h = f.handle("c1:start-again", start_payload("c1", 4, 2));
    CHECK(h.duplicate);
    CHECK(h.answer.next.empty());
    CHECK(f.info("c1").proposed == 2);
  }
}

TEST_CASE("a confirmed fast kernel is sent for promotion", "[scorer][engine]") {
  Fixture f;
  std::map<std::string, int> confirms;
  Driver d = f.driver([&](const proto::Candidate& c, bool confirm) {
    if (confirm) ++confirms[c.program_id];
    if (c.program_id == "c1/p1") return confirm ? correct(c, 1.45, 1.3, 1.6) : correct(c, 1.5, 1.3, 1.7);
    if (c.program_id == "c1/p2") return correct(c, 1.3, 1.2, 1.4);  // passes, but not the best
    return correct(c, 1.0, 0.95, 1.05);
  });
  const uint64_t parses = task::parse_count();
  d.submit("c1:start", start_payload("c1", 3, 3));
  d.run();
  // The package is parsed at the start; every result and the promotion read the spec kept then.
  CHECK(task::parse_count() - parses == 1);

  // The confirmation is the program itself, measured for purpose "confirm": its id carries no mark.
  CHECK(confirms == std::map<std::string, int>{{"c1/p1", 1}});
  CHECK(d.trace.scored_jobs.count("c1/p1:score-confirm") == 1);
  auto confirm_jobs = job_ids(d.trace.followups, "compile");
  CHECK(std::count(confirm_jobs.begin(), confirm_jobs.end(), "c1/p1:compile-confirm") == 1);
  REQUIRE(d.trace.promotions.size() == 1);
  const proto::PromoteRequest& req = d.trace.promotions[0];
  CHECK(req.campaign_id == "c1");
  CHECK(req.program_id == "c1/p1");
  CHECK(req.task_name == "scale_test");
  CHECK(req.op == "scale");
  CHECK(req.backend == proto::Backend::kCpu);
  CHECK(req.dtype == "fp32");
  CHECK(req.source_ext == "cpp");
  CHECK(req.source == kiln::testing::task_files().at("kernel.cpp").data);
  CHECK(req.params.at("BLOCK") == "64");
  CHECK(req.shape == std::map<std::string, int64_t>{{"B", 16}, {"H", 4096}});
  CHECK(req.verification.passed);
  CHECK(req.benchmark.speedup == Approx(1.5));
  CHECK(req.confirmation.speedup == Approx(1.45));
  CHECK(req.timing_method == "host_clock");
  CHECK(req.timing_mode == "cold");
  CHECK(req.worker.device_name == "Test CPU");
  CHECK(req.build.ok);

  proto::CampaignInfo info = f.info("c1");
  CHECK(info.state == "done");
  CHECK(info.promoted == std::vector<std::string>{"cpp_scale_testcpu_fp32_b16_h4096_v1"});
  REQUIRE(info.promotion_notes.size() == 1);
  CHECK(info.promotion_notes[0] == "c1/p1: promoted as cpp_scale_testcpu_fp32_b16_h4096_v1");
  CHECK(info.best_speedup_lo == Approx(1.3));
  CHECK(info.best_speedup_hi == Approx(1.7));
  // The confirmation is not a program of its own.
  CHECK(info.scored == 4);
}

TEST_CASE("no promotion unless the eval and the confirmation both pass", "[scorer][engine]") {
  Fixture f;
  SECTION("the confirmation falls short") {
    Driver d = f.driver([](const proto::Candidate& c, bool confirm) {
      if (c.proposal_index == 1) return confirm ? correct(c, 1.05, 1.0, 1.1) : correct(c, 1.5, 1.3, 1.7);
      return correct(c, 1.0, 0.95, 1.05);
    });
    d.submit("c1:start", start_payload("c1", 2, 2));
    d.run();
    CHECK(d.trace.promotions.empty());
    proto::CampaignInfo info = f.info("c1");
    CHECK(info.state == "done");
    CHECK(info.promoted.empty());
    REQUIRE(info.promotion_notes.size() == 1);
    CHECK(info.promotion_notes[0].find("c1/p1: not confirmed: speedup 1.050") == 0);
  }
  SECTION("the confirmation is wrong") {
    Driver d = f.driver([](const proto::Candidate& c, bool confirm) {
      if (c.proposal_index == 1)
        return confirm ? test_result(c, proto::TestStatus::kMismatch) : correct(c, 1.5, 1.3, 1.7);
      return correct(c, 1.0, 0.95, 1.05);
    });
    d.submit("c1:start", start_payload("c1", 2, 2));
    d.run();
    CHECK(d.trace.promotions.empty());
    CHECK(f.info("c1").promotion_notes.at(0).find("not confirmed: mismatch") != std::string::npos);
  }
  SECTION("the eval's lower bound is below the bar: no confirmation is asked") {
    Driver d = f.driver([](const proto::Candidate& c, bool) {
      if (c.proposal_index == 1) return correct(c, 1.5, 1.05, 1.9);
      return correct(c, 1.0, 0.95, 1.05);
    });
    d.submit("c1:start", start_payload("c1", 2, 2));
    d.run();
    for (const auto& fu : d.trace.followups) CHECK(fu.job_id.find("confirm") == std::string::npos);
    CHECK(d.trace.promotions.empty());
    CHECK(f.info("c1").promotion_notes.empty());
    CHECK(f.info("c1").state == "done");
  }
  SECTION("the promoter refuses") {
    Driver d = f.driver([](const proto::Candidate& c, bool) {
      return c.proposal_index == 1 ? correct(c, 1.5, 1.3, 1.7) : correct(c, 1.0, 0.95, 1.05);
    });
    d.set_promote([](const proto::PromoteRequest& req) {
      proto::PromoteOutcome o;
      o.campaign_id = req.campaign_id;
      o.program_id = req.program_id;
      o.promoted = false;
      o.reason = "same source already registered";
      return o;
    });
    d.submit("c1:start", start_payload("c1", 2, 2));
    d.run();
    proto::CampaignInfo info = f.info("c1");
    CHECK(d.trace.promotions.size() == 1);
    CHECK(info.promoted.empty());
    CHECK(info.promotion_notes.at(0) == "c1/p1: refused: same source already registered");
    CHECK(info.state == "done");
  }
}

TEST_CASE("the campaign waits for a pending confirmation before it is done", "[scorer][engine]") {
  Fixture f;
  scorer::Handled start = f.handle("c1:start", start_payload("c1", 0, 1));
  auto p0 = decode_or_die<proto::CompileRequest>(start.answer.next[0].payload.data).cand;
  scorer::Handled scored = f.handle("c1/p0:score", proto::encode(correct(p0, 2.0, 1.8, 2.2)));
  REQUIRE(scored.answer.next.size() == 1);
  CHECK(scored.answer.next[0].job_id == "c1/p0:compile-confirm");
  const auto confirm_request = decode_or_die<proto::CompileRequest>(scored.answer.next[0].payload.data);
  // The purpose alone says it is a confirmation: the program keeps its id.
  CHECK(confirm_request.purpose == proto::Purpose::kConfirm);
  CHECK(confirm_request.cand.program_id == "c1/p0");
  // Measured again by another tester than the first time when one is connected, on the same device model.
  CHECK(confirm_request.avoid_tester == "tester-1");
  CHECK(confirm_request.tester_device == "Test CPU");
  CHECK(f.info("c1").state == "running");

  proto::ScoreResult confirmation = correct(p0, 1.9, 1.7, 2.1);
  confirmation.purpose = proto::Purpose::kConfirm;
  scorer::Handled confirmed = f.handle("c1/p0:score-confirm", proto::encode(confirmation));
  REQUIRE(confirmed.answer.next.size() == 1);
  CHECK(confirmed.answer.next[0].service == "promote");
  CHECK(confirmed.answer.next[0].job_id == "c1/p0:promote");
  CHECK(f.info("c1").state == "running");

  // A second confirmation result is a duplicate, also as an older tester wrote one (the program id marked
  // "#confirm", purpose "eval"): read as today's at decode.
  proto::ScoreResult legacy = correct(p0, 1.9, 1.7, 2.1);
  legacy.cand.program_id = "c1/p0#confirm";
  scorer::Handled dup = f.handle("c1/p0#confirm:score", proto::encode(legacy));
  CHECK(dup.duplicate);
  CHECK(dup.answer.next.empty());

  proto::PromoteOutcome out;
  out.campaign_id = "c1";
  out.program_id = "c1/p0";
  out.promoted = true;
  out.kernel_id = "k1";
  f.handle("c1/p0:promoted", proto::encode(out));
  CHECK(f.info("c1").state == "done");
  CHECK(f.info("c1").promoted == std::vector<std::string>{"k1"});
  // A late duplicate outcome changes nothing.
  CHECK(f.handle("c1/p0:promoted-again", proto::encode(out)).duplicate);
  CHECK(f.info("c1").promoted.size() == 1);
}

TEST_CASE("dead letters end their candidates so the campaign never stalls", "[scorer][engine]") {
  Fixture f;
  scorer::Handled start = f.handle("c1:start", start_payload("c1", 4, 3));
  REQUIRE(start.answer.next.size() == 4);  // p0 compile + p1..p3 propose
  const proto::FollowUp p0_compile = start.answer.next[0];
  const proto::FollowUp p1_propose = start.answer.next[1];
  const proto::FollowUp p2_propose = start.answer.next[2];
  const proto::FollowUp p3_propose = start.answer.next[3];

  auto dead = [](const proto::FollowUp& job, const std::string& service) {
    return dead_letter(job, service, "worker lost", false);
  };

  // The compile of program 0 killed every compiler: build failed.
  scorer::Handled h0 = f.handle("dead:" + p0_compile.job_id, dead(p0_compile, "compile"));
  CHECK(h0.answer.outcome == messaging::Outcome::kDone);
  CHECK(h0.answer.next.empty());  // in flight went from 4 to 3 = max_in_flight: nothing new yet

  // The proposal p1 died in the bridge: no code.
  scorer::Handled h1 = f.handle("dead:" + p1_propose.job_id, dead(p1_propose, "propose"));
  REQUIRE(h1.answer.next.size() == 1);
  CHECK(h1.answer.next[0].job_id == "c1/p4:propose");

  // p2 reached the tester and killed it every time.
  auto p2 = decode_or_die<proto::ProposalRequest>(p2_propose.payload.data);
  proto::TestRequest test;
  test.cand.campaign_id = "c1";
  test.cand.program_id = p2.program_id;
  test.cand.proposal_index = 2;
  test.cand.code = p2.parent.code;
  test.purpose = proto::Purpose::kEval;
  proto::FollowUp test_job;
  test_job.job_id = "c1/p2:test";
  test_job.payload.data = proto::encode(test);
  f.handle("dead:c1/p2:test", dead(test_job, "test.cpu"));

  // p3 and p4 come back normally.
  for (const char* id : {"c1/p3", "c1/p4"}) {
    proto::Candidate c;
    c.campaign_id = "c1";
    c.program_id = id;
    f.handle(std::string(id) + ":score", proto::encode(correct(c, 1.0, 0.9, 1.1)));
  }

  proto::CampaignInfo info = f.info("c1");
  CHECK(info.state == "done");
  CHECK(info.scored == 5);
  auto programs = f.programs("c1");
  CHECK(programs.at("c1/p0").eval.perf_score == 1);
  CHECK(programs.at("c1/p0").eval.eval_log.find("crashed: worker lost") != std::string::npos);
  CHECK(programs.at("c1/p1").eval.perf_score == 0);
  CHECK(programs.at("c1/p2").eval.perf_score == 2);
  CHECK(programs.at("c1/p2").eval.eval_log.find("crashed: worker lost (dead after 3 attempts)") != std::string::npos);
  CHECK(programs.at("c1/p3").eval.perf_score == 5);

  SECTION("a dead letter for a program already scored is a duplicate") {
    scorer::Handled late = f.handle("dead:c1/p3:test", dead(p3_propose, "propose"));
    CHECK(late.duplicate);
    CHECK(f.info("c1").scored == 5);
  }
}

TEST_CASE("a candidate whose jobs workers gave back until they died is not evaluated, with the cause",
          "[scorer][engine]") {
  Fixture f;
  scorer::Handled start = f.handle("c1:start", start_payload("c1", 3, 2));
  REQUIRE(start.answer.next.size() == 3);  // p0 compile + p1, p2 propose
  const proto::FollowUp p0_compile = start.answer.next[0];
  const proto::FollowUp p1_propose = start.answer.next[1];

  const std::string reference_failed =
      "worker asked to retry: compile: the reference failed to build (a problem of the task, not of the "
      "candidate):\nreference.cpp:1:2: error: #error the reference is broken";

  // Program 0's reference never built: no score, no build failure.
  scorer::Handled h0 = f.handle("dead:c1/p0:compile", dead_letter(p0_compile, "compile", reference_failed, true));
  CHECK(h0.answer.outcome == messaging::Outcome::kDone);
  CHECK(h0.answer.next.empty());  // in flight went from 3 to 2 = max_in_flight
  proto::CampaignInfo info = f.info("c1");
  CHECK(info.not_evaluated == 1);
  CHECK(info.scored == 0);
  CHECK(info.in_flight == 2);

  // The proposer's endpoint stayed down: not evaluated either, and the next proposal takes its place.
  const std::string llm_down = "worker asked to retry: propose: LLM unavailable";
  scorer::Handled h1 = f.handle("dead:c1/p1:propose", dead_letter(p1_propose, "propose", llm_down, true));
  REQUIRE(h1.answer.next.size() == 1);
  CHECK(h1.answer.next[0].job_id == "c1/p3:propose");

  // The others come back normally.
  for (const char* id : {"c1/p2", "c1/p3"}) {
    proto::Candidate c;
    c.campaign_id = "c1";
    c.program_id = id;
    f.handle(std::string(id) + ":score", proto::encode(correct(c, 1.0, 0.9, 1.1)));
  }

  info = f.info("c1");
  CHECK(info.state == "done");
  CHECK(info.scored == 2);
  CHECK(info.not_evaluated == 2);
  auto programs = f.programs("c1");
  CHECK(programs.count("c1/p0") == 0);  // never a parent: not in the archive
  CHECK(programs.count("c1/p1") == 0);
  CHECK(programs.at("c1/p2").eval.perf_score == 5);

  // The archive keeps the cause with the program.
  auto db = store::Database::open(f.db_path);
  REQUIRE(db.is_ok());
  auto row = db->prepare("SELECT state, status, perf_score, eval_log, record FROM programs WHERE id = 'c1/p0'");
  REQUIRE(row.is_ok());
  REQUIRE(row->step().value());
  CHECK(row->column_text(0) == "not_evaluated");
  CHECK(row->column_text(1) == "not_evaluated");
  CHECK(row->column_int(2) == -1);
  CHECK(row->column_text(3) == "not evaluated: " + reference_failed + " (dead after 3 attempts)");
  auto record = decode_or_die<proto::Program>(row->column_blob(4));
  CHECK(record.eval.status == "not_evaluated");
  CHECK(record.eval.eval_log == row->column_text(3));
  CHECK(record.metadata.at("stage") == "compile");

  SECTION("a second dead letter for the same program is a duplicate") {
    CHECK(f.handle("dead:c1/p0:test", dead_letter(p0_compile, "compile", reference_failed, true)).duplicate);
    CHECK(f.info("c1").not_evaluated == 2);
  }
}

TEST_CASE("a result whose code changed the task's kernel outside the regions is scored as no code",
          "[scorer][engine][regions]") {
  // The compiler refuses such code, but it checks against the package its compile request carried, and
  // an external bridge writes that itself: the scorer checks again against the campaign's copy.
  Fixture f;
  scorer::Handled start = f.handle("c1:start", start_payload("c1", 2, 2));
  auto p1 = decode_or_die<proto::ProposalRequest>(start.answer.next.at(1).payload.data);
  auto p2 = decode_or_die<proto::ProposalRequest>(start.answer.next.at(2).payload.data);
  auto candidate = [](const proto::ProposalRequest& req, std::string code) {
    proto::Candidate c;
    c.campaign_id = "c1";
    c.program_id = req.program_id;
    c.proposal_index = req.proposal_index;
    c.code = std::move(code);
    return c;
  };
  const std::string kernel = kiln::testing::task_files().at("kernel.cpp").data;
  std::string forged = kernel;
  forged.replace(forged.find("  return 0;"), 11, "  return system(\"true\");");
  f.handle("c1/p1:score", proto::encode(correct(candidate(p1, forged), 3.0, 2.9, 3.1)));
  std::string edited = kernel;
  edited.replace(edited.find("(void)a;"), 8, "(void)a; (void)0;");
  f.handle("c1/p2:score", proto::encode(correct(candidate(p2, edited), 1.5, 1.4, 1.6)));

  auto programs = f.programs("c1");
  const proto::EvalResult& refused = programs.at("c1/p1").eval;
  CHECK(refused.perf_score == 0);
  CHECK(refused.status == "no_code");
  CHECK(refused.runtime_improvement == -1);
  CHECK(refused.eval_log ==
        "no code extracted: the proposal changed code outside the editable regions (line 6: \"return "
        "system(\"true\");\" where the task's kernel has \"return 0;\")");
  CHECK(programs.at("c1/p1").code == forged);        // what was proposed stays on record
  CHECK(programs.at("c1/p2").eval.perf_score == 5);  // an edit inside the region is the proposer's
  CHECK(f.info("c1").best_program_id != "c1/p1");
}

TEST_CASE("a dead confirmation or promotion is recorded as a note", "[scorer][engine]") {
  Fixture f;
  scorer::Handled start = f.handle("c1:start", start_payload("c1", 0, 1));
  auto p0 = decode_or_die<proto::CompileRequest>(start.answer.next[0].payload.data).cand;
  scorer::Handled scored = f.handle("c1/p0:score", proto::encode(correct(p0, 2.0, 1.8, 2.2)));
  const proto::FollowUp confirm_compile = scored.answer.next.at(0);

  proto::DeadLetter d;
  d.job_id = confirm_compile.job_id;
  d.service = "compile";
  d.attempts = 3;
  d.payload = confirm_compile.payload;
  SECTION("its workers were lost") {
    d.reason = "compiler killed";
    scorer::Handled h = f.handle("dead:" + d.job_id, proto::encode(d));
    CHECK(h.answer.next.empty());
    proto::CampaignInfo info = f.info("c1");
    CHECK(info.state == "done");
    CHECK(info.promotion_notes.at(0).find("c1/p0: not confirmed: build_failed: crashed: compiler killed") == 0);
  }
  SECTION("its workers gave it back, naming a fault of theirs") {
    d.reason = "worker asked to retry: compile: toolchain: g++ killed by SIGSEGV";
    d.worker_retry = true;
    scorer::Handled h = f.handle("dead:" + d.job_id, proto::encode(d));
    CHECK(h.answer.next.empty());
    proto::CampaignInfo info = f.info("c1");
    CHECK(info.state == "done");
    CHECK(info.not_evaluated == 0);  // the program itself was evaluated
    CHECK(info.promotion_notes.at(0) ==
          "c1/p0: not confirmed: not evaluated: worker asked to retry: compile: toolchain: g++ killed by SIGSEGV"
          " (dead after 3 attempts)");
  }
  SECTION("its test job waited in vain for a tester of the first measurement's device model") {
    proto::TestRequest t;
    t.cand = decode_or_die<proto::CompileRequest>(confirm_compile.payload.data).cand;
    t.purpose = proto::Purpose::kConfirm;
    d.job_id = proto::job_id::test(t.cand.program_id, t.purpose);
    d.service = "test.cpu";
    d.attempts = 1;
    d.payload = proto::Bytes{proto::encode(t)};
    d.reason = "no worker of 'test.cpu' on 'Test CPU' was connected for 600 s";
    d.worker_retry = true;
    scorer::Handled h = f.handle("dead:" + d.job_id, proto::encode(d));
    CHECK(h.answer.next.empty());
    proto::CampaignInfo info = f.info("c1");
    CHECK(info.state == "done");
    CHECK(info.promotion_notes.at(0) ==
          "c1/p0: not confirmed: not evaluated: no worker of 'test.cpu' on 'Test CPU' was connected for 600 s"
          " (dead after 1 attempts)");
  }
  CHECK(f.programs("c1").at("c1/p0").eval.perf_score == 5);  // the program's own score stands
}

TEST_CASE("the archive survives a restart and resumes where it stopped", "[scorer][engine]") {
  auto test = [](const proto::Candidate& c, bool confirm) {
    if (c.proposal_index == 5) return confirm ? correct(c, 1.6, 1.4, 1.8) : correct(c, 1.7, 1.5, 1.9);
    if (c.proposal_index % 4 == 2) return test_result(c, proto::TestStatus::kTimedOut);
    return correct(c, 1.0 + 0.02 * static_cast<double>(c.proposal_index), 0.9, 1.2);
  };

  // Reference: the same campaign, uninterrupted.
  Fixture ref;
  Driver rd = ref.driver(test);
  rd.submit("c1:start", start_payload("c1", 9, 2));
  rd.run();
  REQUIRE(ref.info("c1").state == "done");

  Fixture f;
  Driver d = f.driver(test);
  d.submit("c1:start", start_payload("c1", 9, 2));
  d.run(6);
  REQUIRE_FALSE(d.idle());
  proto::CampaignInfo before = f.info("c1");
  CHECK(before.state == "running");

  f.reopen();
  proto::CampaignInfo after = f.info("c1");
  CHECK(proto::encode(after) == proto::encode(before));

  // A job handled before the restart still gets its stored answer.
  scorer::Handled replay = f.handle("c1:start", start_payload("c1", 9, 2));
  CHECK(replay.replayed);
  CHECK(replay.answer.next.size() == 3);

  d.run();
  proto::CampaignInfo done = f.info("c1");
  CHECK(done.state == "done");
  CHECK(done.proposed == 9);
  CHECK(done.scored == 10);
  CHECK(done.promoted.size() == 1);
  CHECK(*f.engine->duplicates_ignored() == 0);

  // Same follow-ups, byte for byte, as the run that never stopped: parent choices replayed exactly.
  REQUIRE(d.trace.followups.size() == rd.trace.followups.size());
  for (size_t i = 0; i < d.trace.followups.size(); ++i) {
    INFO(d.trace.followups[i].job_id);
    CHECK(d.trace.followups[i].job_id == rd.trace.followups[i].job_id);
    CHECK(d.trace.followups[i].payload == rd.trace.followups[i].payload);
  }
  CHECK(done.best_program_id == ref.info("c1").best_program_id);
}

TEST_CASE("bad input is refused without changing anything", "[scorer][engine]") {
  Fixture f;
  CHECK(f.refuse("j1", "not msgpack").code() == StatusCode::kInvalidArgument);

  proto::PromoteOutcome odd;
  odd.kind = "mystery";
  Status unknown_kind = f.refuse("j2", proto::encode(odd));
  CHECK(unknown_kind.code() == StatusCode::kInvalidArgument);
  CHECK(unknown_kind.message().find("unknown payload kind 'mystery'") != std::string::npos);

  proto::Candidate c;
  c.campaign_id = "nope";
  c.program_id = "nope/p1";
  Status no_campaign = f.refuse("nope/p1:score", proto::encode(correct(c, 1.0, 1.0, 1.0)));
  CHECK(no_campaign.code() == StatusCode::kNotFound);
  CHECK(no_campaign.message().find("unknown campaign 'nope'") != std::string::npos);

  proto::FileMap broken = kiln::testing::task_files();
  broken["task.yaml"].data += "surprise: 1\n";
  Status bad_task = f.refuse("c9:start", start_payload("c9", 2, 2, broken));
  CHECK(bad_task.code() == StatusCode::kInvalidArgument);
  CHECK(bad_task.message().find("campaign c9: task.yaml") == 0);
  CHECK(f.engine->campaign("c9").status().code() == StatusCode::kNotFound);

  // Nothing was stored for the refused job: once the campaign exists the same id is handled for real.
  f.handle("nope:start", start_payload("nope", 1, 1));
  scorer::Handled later = f.handle("nope/p1:score", proto::encode(correct(c, 1.0, 1.0, 1.0)));
  CHECK(later.answer.outcome == messaging::Outcome::kDone);
  CHECK_FALSE(later.replayed);
}

TEST_CASE("queries list campaigns and the best programs with their lineage", "[scorer][engine]") {
  Fixture f;
  Driver d = f.driver(plain);
  d.submit("c1:start", start_payload("c1", 5, 1));
  d.run();
  Driver d2 = f.driver(plain, "c2");
  d2.submit("c2:start", start_payload("c2", 1, 1));
  d2.run();

  auto all = f.engine->campaigns({});
  REQUIRE(all.is_ok());
  REQUIRE(all->campaigns.size() == 2);
  CHECK(all->campaigns[0].campaign_id == "c1");
  CHECK(all->campaigns[1].campaign_id == "c2");
  proto::CampaignQuery only;
  only.campaign_id = "c2";
  CHECK(f.engine->campaigns(only)->campaigns.size() == 1);

  CHECK(f.engine->campaign("zzz").status().code() == StatusCode::kNotFound);
  proto::CampaignQuery q;
  q.campaign_id = "c1";
  q.top = 3;
  auto best = f.engine->best(q);
  REQUIRE(best.is_ok());
  CHECK(best->campaign.campaign_id == "c1");
  REQUIRE(best->programs.size() == 3);
  CHECK(best->programs[0].id == "c1/p5");
  CHECK(best->programs[0].eval.combined_score >= best->programs[1].eval.combined_score);
  CHECK(best->programs[1].eval.combined_score >= best->programs[2].eval.combined_score);
  // Lineage: ancestors nearest first, ending at program 0.
  const std::string lineage = best->programs[0].metadata.at("lineage");
  CHECK(lineage.rfind("c1/p0") == lineage.size() - 5);
  CHECK(lineage.find(best->programs[0].parent_id) == 0);

  auto speedups = f.engine->best_speedup_by_task();
  REQUIRE(speedups.is_ok());
  CHECK(speedups->at("scale_test") == Approx(1.05));
}

namespace {

// The fixture task with a second benchmark case, B=64,H=4096.
proto::FileMap two_case_files() {
  proto::FileMap files = kiln::testing::task_files();
  std::string& yaml = files["task.yaml"].data;
  const std::string one = "  cases: [{B: 16, H: 4096}]\n";
  REQUIRE(yaml.find(one) != std::string::npos);
  yaml.replace(yaml.find(one), one.size(), "  cases: [{B: 16, H: 4096}, {B: 64, H: 4096}]\n");
  return files;
}

// A correct result timed on both cases of two_case_files().
proto::ScoreResult two_cases(const proto::Candidate& c, double first, double second) {
  proto::ScoreResult r = correct(c, first, first - 0.1, first + 0.1);
  proto::CaseTiming big = kiln::testing::timing(second, second - 0.1, second + 0.1);
  big.dims = {{"B", 64}, {"H", 4096}};
  r.test.performance.cases.push_back(big);
  return r;
}

}  // namespace

TEST_CASE("a kernel fast on one benchmark case and slow on the other is ranked by both and not promoted",
          "[scorer][engine]") {
  Fixture f;
  std::map<std::string, int> confirms;
  Driver d = f.driver([&](const proto::Candidate& c, bool confirm) {
    if (confirm) ++confirms[c.program_id];
    if (c.proposal_index == 1) return two_cases(c, 4.0, 0.5);  // 4x on the first case, 2x slower on the second
    if (c.proposal_index == 2) return two_cases(c, 2.0, 1.8);  // faster on both
    return two_cases(c, 1.0, 1.0);
  });
  d.submit("c1:start", start_payload("c1", 3, 1, two_case_files()));
  d.run();

  auto programs = f.programs("c1");
  const proto::Program& split = programs.at("c1/p1");
  const proto::Program& both = programs.at("c1/p2");
  CHECK(split.eval.combined_score == Approx(5 + std::sqrt(4.0 * 0.5)));
  CHECK(both.eval.combined_score == Approx(5 + std::sqrt(2.0 * 1.8)));
  REQUIRE(split.eval.cases.size() == 2);
  CHECK(split.eval.cases[1].speedup == Approx(0.5));
  // On its first case alone p1 would lead with 9.0; over both it is behind p2.
  proto::CampaignInfo info = f.info("c1");
  CHECK(info.best_program_id == "c1/p2");
  CHECK(info.best_speedup == Approx(std::sqrt(2.0 * 1.8)));
  CHECK(info.best_speedup_lo == Approx(std::sqrt(1.9 * 1.7)));

  // p1 was the best when it was scored (after p0), yet never measured again: case 2 is below the bar.
  CHECK(confirms == std::map<std::string, int>{{"c1/p2", 1}});
  REQUIRE(d.trace.promotions.size() == 1);
  const proto::PromoteRequest& req = d.trace.promotions[0];
  CHECK(req.program_id == "c1/p2");
  CHECK(req.shape == std::map<std::string, int64_t>{{"B", 16}, {"H", 4096}});  // the first case names it
  CHECK(req.benchmark.speedup == Approx(2.0));
  REQUIRE(req.benchmark_cases.size() == 2);
  REQUIRE(req.confirmation_cases.size() == 2);
  CHECK(req.benchmark_cases[1].dims.at("B") == 64);
  CHECK(req.confirmation_cases[1].speedup == Approx(1.8));
}

TEST_CASE("scored programs carry their task, complexity, diversity and the parameter sets tried", "[scorer][engine]") {
  Fixture f;
  Driver d = f.driver(plain);
  // p2 rewrites the region with an OpenMP loop, a new behaviour; the others keep program 0's code.
  d.set_propose([](const proto::FollowUp& job) {
    auto req = decode_or_die<proto::ProposalRequest>(job.payload.data);
    proto::CompileRequest c;
    c.cand.campaign_id = "c1";
    c.cand.program_id = req.program_id;
    c.cand.parent_id = req.parent.program_id;
    c.cand.generation = req.parent.generation + 1;
    c.cand.proposal_index = req.proposal_index;
    c.cand.proposer = "tuner";
    c.cand.code = kiln::testing::task_files().at("kernel.cpp").data;
    if (req.proposal_index == 2) {
      auto code =
          task::replace_region(c.cand.code, "#pragma omp parallel for\n  for (int i = 0; i < 1; ++i) (void)a;\n");
      REQUIRE(code.is_ok());
      c.cand.code = *code;
    }
    c.cand.params = {{"BLOCK", std::to_string(64 * req.proposal_index)}};
    return std::vector<proto::FollowUp>{{"compile", req.program_id + ":compile", {proto::encode(c)}, 0}};
  });
  d.submit("c1:start", start_payload("c1", 3, 1));
  d.run();
  auto programs = f.programs("c1");
  REQUIRE(programs.size() == 4);

  for (const auto& [id, p] : programs) {
    INFO(id);
    CHECK(p.task.task_id == "t-c1");
    CHECK(p.task.name == "scale_test");
    CHECK(p.task.op == "scale");
    CHECK(p.task.backend == proto::Backend::kCpu);
    CHECK(p.task.dtype == "fp32");
    CHECK(p.eval.metadata.at("device") == "Test CPU");
  }
  // The fixture kernel: 7 lines, two of them the region's marker comments.
  CHECK(programs.at("c1/p0").complexity == 5);
  CHECK(programs.at("c1/p2").complexity == 6);
  // Program 0 met an empty archive; p2's OpenMP loop is one parallelism level from everything before it.
  CHECK(programs.at("c1/p0").diversity == 0);
  CHECK(programs.at("c1/p1").diversity == 0);
  CHECK(programs.at("c1/p2").diversity == Approx(1.0 / 15.0));

  // Every parameter set tried with program 0's code, and what each scored; p2's code was tried once.
  const auto& tried = programs.at("c1/p0").eval.template_results;
  CHECK(tried.size() == 3);
  CHECK(tried.at("BLOCK=64 VEC=1") == Approx(programs.at("c1/p0").eval.combined_score));
  CHECK(tried.at("BLOCK=64") == Approx(programs.at("c1/p1").eval.combined_score));
  CHECK(tried.at("BLOCK=192") == Approx(programs.at("c1/p3").eval.combined_score));
  CHECK(programs.at("c1/p3").eval.template_results == tried);
  CHECK(programs.at("c1/p2").eval.template_results ==
        std::map<std::string, double>{{"BLOCK=128", programs.at("c1/p2").eval.combined_score}});
}
