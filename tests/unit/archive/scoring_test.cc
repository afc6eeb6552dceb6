#include "kiln/archive/scoring.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "kiln/testing/campaign_fixtures.h"

using namespace kiln;
using kiln::testing::build_failed;
using kiln::testing::correct;
using kiln::testing::test_result;

namespace {
proto::Candidate cand() {
  proto::Candidate c;
  c.campaign_id = "c1";
  c.program_id = "c1/p3";
  c.params = {{"BLOCK", "256"}, {"VEC", "4"}};
  return c;
}
}  // namespace

TEST_CASE("perf_score follows DESIGN §6 for every stage and status", "[archive][scoring]") {
  proto::ScoreResult propose;
  propose.stage = proto::Stage::kPropose;
  propose.error = "no code block in the reply";
  CHECK(archive::perf_score_for(propose) == 0);
  CHECK(archive::status_for(propose) == "no_code");
  CHECK(archive::perf_score_for(build_failed(cand(), "x.cpp:1: error: nope")) == 1);

  using proto::TestStatus;
  const std::vector<std::pair<std::optional<TestStatus>, int64_t>> by_status = {{TestStatus::kCrashed, 2},
                                                                                {TestStatus::kTimedOut, 2},
                                                                                {TestStatus::kLoadFailed, 2},
                                                                                {TestStatus::kEvaluatorError, 2},
                                                                                {std::nullopt, 2},
                                                                                {TestStatus::kWrongShape, 3},
                                                                                {TestStatus::kNonFinite, 3},
                                                                                {TestStatus::kMismatch, 4},
                                                                                {TestStatus::kInputModified, 4},
                                                                                {TestStatus::kOk, 5}};
  for (const auto& [status, score] : by_status) {
    INFO("status " << kiln::testing::status_word(status));
    proto::ScoreResult r = test_result(cand(), status);
    CHECK(archive::perf_score_for(r) == score);
    proto::EvalResult e = archive::evaluate(r);
    CHECK(e.perf_score == score);
    CHECK(e.compiled);
    CHECK(e.correctness == (score == 5));
    // The word stored with the score is the wire's word.
    if (status) CHECK(e.status == proto::name(*status));
  }
  CHECK(archive::status_for(test_result(cand(), std::nullopt)) == "crashed");
}

TEST_CASE("evaluate fills runtime, speedup, baseline and the fitness", "[archive][scoring]") {
  proto::ScoreResult r = correct(cand(), 1.5, 1.4, 1.6);
  r.test.performance.cases[0].candidate.median_us = 20.0;
  proto::BaselineTiming b;
  b.name = "openblas";
  b.stats.median_us = 50.0;
  b.speedup = 2.5;
  r.test.performance.cases[0].baselines.push_back(b);
  r.build.registers = 32;

  proto::EvalResult e = archive::evaluate(r);
  CHECK(e.runtime == Approx(0.02));  // ms
  CHECK(e.runtime_improvement == Approx(1.5));
  CHECK(e.improve_over_baseline == Approx(2.5));
  CHECK(e.combined_score == Approx(6.5));
  CHECK(e.runtime_stats.at("speedup_lo") == Approx(1.4));
  CHECK(e.runtime_stats.at("median_us") == Approx(20.0));
  CHECK(e.profiler_data.at("registers") == 32);
  CHECK_FALSE(e.profiler_data.count("spill_bytes"));

  SECTION("unmeasured speedup: a correct kernel adds 1/runtime") {
    r.test.performance.cases[0].speedup = 0;
    e = archive::evaluate(r);
    CHECK(e.runtime_improvement == -1);
    CHECK(e.improve_over_baseline == Approx(2.5));
    CHECK(e.combined_score == Approx(5 + 1 / 0.02));
  }
  SECTION("not timed at all") {
    r.test.performance = {};
    e = archive::evaluate(r);
    CHECK(e.runtime == -1);
    CHECK(e.runtime_improvement == -1);
    CHECK(e.improve_over_baseline == -1);
    CHECK(e.combined_score == 5);
  }
  SECTION("an incorrect kernel never gains from its timing") {
    proto::ScoreResult wrong = test_result(cand(), proto::TestStatus::kMismatch, 9.0, 8.0, 10.0);
    e = archive::evaluate(wrong);
    CHECK(e.combined_score == 4);
    CHECK(e.combined_score < archive::evaluate(test_result(cand(), proto::TestStatus::kOk)).combined_score);
  }
}

TEST_CASE("eval_log is condensed and bounded", "[archive][scoring]") {
  SECTION("compile errors are picked out of a long log") {
    std::string log;
    for (int i = 0; i < 500; ++i) log += "x.cpp:" + std::to_string(i) + ": note: candidate is something long\n";
    log += "x.cpp:501:3: error: 'foo' was not declared in this scope\n";
    for (int i = 0; i < 500; ++i) log += "x.cpp: note: more noise\n";
    proto::EvalResult e = archive::evaluate(build_failed(cand(), log));
    CHECK(e.eval_log.size() <= archive::kMaxEvalLogBytes);
    CHECK(e.eval_log.find("build failed") == 0);
    CHECK(e.eval_log.find("'foo' was not declared") != std::string::npos);
    CHECK(e.eval_log.find("note: more noise") == std::string::npos);
  }
  SECTION("an error-free log is cut at the bound") {
    proto::EvalResult e = archive::evaluate(build_failed(cand(), std::string(10000, 'n')));
    CHECK(e.eval_log.size() <= archive::kMaxEvalLogBytes);
    CHECK(e.eval_log.find("[...]") != std::string::npos);
  }
  SECTION("wrong values: status and the first mismatches") {
    proto::EvalResult e = archive::evaluate(test_result(cand(), proto::TestStatus::kMismatch));
    CHECK(e.eval_log.find("mismatch") == 0);
    CHECK(e.eval_log.find("y[1]: got 2 expected 1") != std::string::npos);
    CHECK(e.eval_log.find("3 mismatches") != std::string::npos);
  }
  SECTION("correct: a timing summary with the interval and the params") {
    proto::EvalResult e = archive::evaluate(correct(cand(), 1.5, 1.4, 1.6));
    CHECK(e.eval_log.find("speedup 1.500 [1.400, 1.600]") != std::string::npos);
    CHECK(e.eval_log.find("median 10 us") != std::string::npos);
    CHECK(e.eval_log.find("params: BLOCK=256 VEC=4") != std::string::npos);
  }
  SECTION("truncation never splits a UTF-8 sequence") {
    std::string s = "ab" + std::string("\xc3\xa9") + std::string(100, 'x');
    std::string cut = archive::truncate_utf8(s, 9);  // keep = 3: inside the two-byte é
    CHECK(cut.size() <= 9);
    CHECK(cut.rfind("ab", 0) == 0);
    CHECK(cut.find('\xc3') == std::string::npos);
  }
}

TEST_CASE("speedup_shortfall states why a measurement misses the promotion bar", "[archive][scoring]") {
  CHECK(archive::speedup_shortfall(correct(cand(), 1.3, 1.2, 1.4), 1.10).empty());
  CHECK(archive::speedup_shortfall(correct(cand(), 1.3, 1.05, 1.4), 1.10).find("below 1.10") != std::string::npos);
  CHECK(archive::speedup_shortfall(correct(cand(), 1.05, 1.0, 1.1), 1.10).find("speedup 1.050") != std::string::npos);
  CHECK(archive::speedup_shortfall(test_result(cand(), proto::TestStatus::kOk), 1.10) == "not timed");
  CHECK(archive::speedup_shortfall(test_result(cand(), proto::TestStatus::kCrashed), 1.10).find("crashed") == 0);
}

namespace {
// A measurement of two benchmark cases: `first` on B=16,H=4096 (10 us) and `second` on B=64,H=4096 (20 us).
proto::ScoreResult two_cases(double first, double first_lo, double second, double second_lo) {
  proto::ScoreResult r = correct(cand(), first, first_lo, first + 0.2);
  proto::CaseTiming big = kiln::testing::timing(second, second_lo, second + 0.05, 20.0);
  big.dims = {{"B", 64}, {"H", 4096}};
  r.test.performance.cases.push_back(big);
  return r;
}
}  // namespace

TEST_CASE("every benchmark case counts: the fitness is the geometric mean of their speedups", "[archive][scoring]") {
  // 4x faster on the first case, 2x slower on the second.
  proto::ScoreResult r = two_cases(4.0, 3.8, 0.5, 0.45);
  proto::EvalResult e = archive::evaluate(r);
  CHECK(e.runtime_improvement == Approx(std::sqrt(4.0 * 0.5)));
  CHECK(e.combined_score == Approx(5 + std::sqrt(2.0)));
  // The first case alone would have scored 5 + 4.
  proto::ScoreResult first_only = r;
  first_only.test.performance.cases.pop_back();
  CHECK(archive::evaluate(first_only).combined_score == Approx(9.0));

  CHECK(e.runtime == Approx(std::sqrt(10.0 * 20.0) / 1000.0));  // ms
  CHECK(e.runtime_stats.at("speedup") == Approx(std::sqrt(2.0)));
  CHECK(e.runtime_stats.at("speedup_lo") == Approx(std::sqrt(3.8 * 0.45)));
  CHECK(e.runtime_stats.at("speedup_hi") == Approx(std::sqrt(4.2 * 0.55)));
  CHECK(e.runtime_stats.at("min_speedup_lo") == Approx(0.45));
  CHECK(e.runtime_stats.at("cases") == 2);
  CHECK(e.runtime_stats.at("median_us") == Approx(std::sqrt(200.0)));
  REQUIRE(e.cases.size() == 2);
  CHECK(e.cases[0].dims == std::map<std::string, int64_t>{{"B", 16}, {"H", 4096}});
  CHECK(e.cases[0].speedup == Approx(4.0));
  CHECK(e.cases[1].dims == std::map<std::string, int64_t>{{"B", 64}, {"H", 4096}});
  CHECK(e.cases[1].speedup == Approx(0.5));
  CHECK(e.cases[1].speedup_lo == Approx(0.45));
  CHECK(e.cases[1].speedup_hi == Approx(0.55));
  CHECK(e.cases[1].median_us == Approx(20.0));
  CHECK(e.cases[1].reference_median_us == Approx(10.0));
  CHECK(e.cases[1].n == 20);

  // Both cases are in the feedback, with the mean the fitness uses.
  CHECK(e.eval_log.find("B=16,H=4096: median 10 us") != std::string::npos);
  CHECK(e.eval_log.find("B=64,H=4096: median 20 us") != std::string::npos);
  CHECK(e.eval_log.find("geomean speedup over 2 cases 1.414") != std::string::npos);

  SECTION("a case without a speedup leaves no mean") {
    r.test.performance.cases[1].speedup = 0;
    CHECK(archive::evaluate(r).runtime_improvement == -1);
  }
}

TEST_CASE("a kernel fast on one case and slow on another does not clear the promotion bar", "[archive][scoring]") {
  // Its geometric mean (1.41) and the geometric mean of its lower bounds (1.31) would both clear 1.10.
  const std::string why = archive::speedup_shortfall(two_cases(4.0, 3.8, 0.5, 0.45), 1.10);
  CHECK(why == "B=64,H=4096: speedup 0.500 [0.450, 0.550] below 1.10");

  // Every case must clear it, the lower bound included; each one that does not is named.
  CHECK(archive::speedup_shortfall(two_cases(1.5, 1.3, 1.4, 1.2), 1.10).empty());
  const std::string both = archive::speedup_shortfall(two_cases(1.05, 1.0, 1.3, 1.05), 1.10);
  CHECK(both.find("B=16,H=4096: speedup 1.050") == 0);
  CHECK(both.find("; B=64,H=4096: speedup 1.300 [1.050, 1.350] below 1.10") != std::string::npos);
}

TEST_CASE("the evaluation records how it was measured", "[archive][scoring]") {
  proto::ScoreResult r = correct(cand(), 1.5, 1.4, 1.6);
  r.test.metadata = {{"evaluator", "kiln-eval"}, {"timing_min_samples", "10"}};
  r.test.worker.driver_version = "550.1";
  r.build.toolchain = "g++ (Debian 12.2.0-14) 12.2.0";
  r.build.flags = "-O3";
  proto::EvalResult e = archive::evaluate(r);
  CHECK(e.metadata.at("evaluator") == "kiln-eval");
  CHECK(e.metadata.at("timing_min_samples") == "10");
  CHECK(e.metadata.at("device") == "Test CPU");
  CHECK(e.metadata.at("worker_id") == "tester-1");
  CHECK(e.metadata.at("driver_version") == "550.1");
  CHECK(e.metadata.at("timing_method") == "host_clock");
  CHECK(e.metadata.at("timing_mode") == "cold");
  CHECK(e.metadata.at("build_toolchain") == "g++ (Debian 12.2.0-14) 12.2.0");
  CHECK(e.metadata.at("build_flags") == "-O3");
  CHECK_FALSE(e.metadata.count("host"));  // unknown: left out
  // Nothing was measured for a build that failed.
  CHECK(archive::evaluate(build_failed(cand(), "error")).metadata.empty());
}

TEST_CASE("a tester's Nsight Compute profile reaches profiler_data and the proposer's eval_log", "[archive][scoring]") {
  proto::ScoreResult r = correct(cand(), 2.0, 1.9, 2.1);
  r.test.profile = {{"kernels", 1}, {"dram_pct", 81}, {"limiter", 1}, {"profile_s", 2.5}};
  r.test.profile_summary = "profile on N=4096: 1 kernel, 120.3 us: dram 81 %, sm 12 % of peak: memory bound";
  proto::EvalResult e = archive::evaluate(r);
  CHECK(e.profiler_data.at("ncu_dram_pct") == 81);
  CHECK(e.profiler_data.at("ncu_limiter") == 1);
  CHECK(e.profiler_data.at("ncu_profile_s") == 2.5);
  CHECK(e.eval_log.find(r.test.profile_summary + "\n") != std::string::npos);
  // A verdict is unchanged by it: the same result without a profile scores the same.
  proto::ScoreResult plain = correct(cand(), 2.0, 1.9, 2.1);
  CHECK(archive::evaluate(plain).combined_score == e.combined_score);
  CHECK(archive::evaluate(plain).eval_log.find("profile") == std::string::npos);
}
