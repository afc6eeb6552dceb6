// Pins every string ids.h writes: these are wire formats (job ids the broker deduplicates on, stage and
// backend words inside messages), so a change here is a protocol change.
#include <catch2/catch.hpp>

#include <string>

#include "kiln/core/files.h"
#include "kiln/proto/codec.h"
#include "kiln/proto/ids.h"
#include "kiln/proto/payloads.h"

using namespace kiln::proto;

TEST_CASE("backends are named and parsed", "[proto][ids]") {
  CHECK(name(Backend::kCpu) == "cpu");
  CHECK(name(Backend::kCuda) == "cuda");
  for (Backend b : {Backend::kCpu, Backend::kCuda}) {
    auto parsed = parse_backend(name(b));
    REQUIRE(parsed.is_ok());
    CHECK(*parsed == b);
  }
  CHECK(kernel_language(Backend::kCpu) == "cpp");
  CHECK(kernel_language(Backend::kCuda) == "cuda");
  CHECK(source_extension(Backend::kCpu) == "cpp");
  CHECK(source_extension(Backend::kCuda) == "cu");
  CHECK(test_service_for(Backend::kCpu) == "test.cpu");
  CHECK(test_service_for(Backend::kCuda) == "test.cuda");
  CHECK(test_service_for(Backend::kCpu) == svc::kTestCpu);
  CHECK(test_service_for(Backend::kCuda) == svc::kTestCuda);

  for (std::string bad : {"", "CUDA", "tpu", "cuda ", "test.cuda"}) {
    auto parsed = parse_backend(bad);
    REQUIRE_FALSE(parsed.is_ok());
    CHECK(parsed.status().code() == kiln::StatusCode::kInvalidArgument);
    CHECK(parsed.status().message() == "unknown backend \"" + bad + "\" (expected cpu or cuda)");
  }
}

TEST_CASE("stages and purposes are named and parsed", "[proto][ids]") {
  CHECK(name(Stage::kPropose) == "propose");
  CHECK(name(Stage::kCompile) == "compile");
  CHECK(name(Stage::kTest) == "test");
  for (Stage s : {Stage::kPropose, Stage::kCompile, Stage::kTest}) CHECK(parse_word<Stage>(name(s)).value() == s);
  auto bad = parse_word<Stage>("score");
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().message() == "unknown stage \"score\" (expected propose, compile or test)");
  CHECK_FALSE(parse_word<Stage>("").is_ok());

  CHECK(name(Purpose::kEval) == "eval");
  CHECK(name(Purpose::kConfirm) == "confirm");
  CHECK(parse_word<Purpose>("confirm").value() == Purpose::kConfirm);
  CHECK(parse_word<Purpose>("Confirm").status().message() == "unknown purpose \"Confirm\" (expected eval or confirm)");
}

TEST_CASE("the golden ScoreResult's stage decodes", "[proto][ids]") {
  auto bytes = kiln::read_file(std::string(KILN_SOURCE_DIR) + "/proto-msgs/golden/score_result.msgpack");
  REQUIRE(bytes.is_ok());
  auto r = decode<ScoreResult>(*bytes);
  REQUIRE(r.is_ok());
  CHECK(r->stage == Stage::kTest);
  CHECK(r->purpose == Purpose::kEval);
}

TEST_CASE("job ids of a candidate's steps", "[proto][ids]") {
  CHECK(job_id::compile("c1/p3") == "c1/p3:compile");
  CHECK(job_id::compile_confirm("c1/p3") == "c1/p3:compile-confirm");
  CHECK(job_id::test("c1/p3") == "c1/p3:test");
  CHECK(job_id::test_confirm("c1/p3") == "c1/p3:test-confirm");
  CHECK(job_id::score("c1/p3") == "c1/p3:score");
  CHECK(job_id::score_confirm("c1/p3") == "c1/p3:score-confirm");
  CHECK(job_id::promote("c1/p3") == "c1/p3:promote");
  CHECK(job_id::promoted("c1/p3") == "c1/p3:promoted");
  // A confirmation's chain runs under the program's own id, its steps named for the purpose.
  CHECK(job_id::compile("c1/p3", Purpose::kEval) == "c1/p3:compile");
  CHECK(job_id::compile("c1/p3", Purpose::kConfirm) == "c1/p3:compile-confirm");
  CHECK(job_id::test("c1/p3", Purpose::kEval) == "c1/p3:test");
  CHECK(job_id::test("c1/p3", Purpose::kConfirm) == "c1/p3:test-confirm");
  CHECK(job_id::score("c1/p3", Purpose::kEval) == "c1/p3:score");
  CHECK(job_id::score("c1/p3", Purpose::kConfirm) == "c1/p3:score-confirm");
}

TEST_CASE("job ids of campaigns and dead letters", "[proto][ids]") {
  CHECK(job_id::dead_letter("c1/p3:test") == "dead:c1/p3:test");
  CHECK(job_id::campaign_start("c1") == "campaign:c1:start");
  CHECK(job_id::ingest("c1") == "ingest:c1");

  CHECK(job_id::dead_letter_of("dead:c1/p3:test") == "c1/p3:test");
  CHECK(job_id::dead_letter_of("dead:") == "");
  CHECK_FALSE(job_id::dead_letter_of("c1/p3:test").has_value());
  CHECK_FALSE(job_id::dead_letter_of("Dead:c1/p3:test").has_value());
}

TEST_CASE("a candidate's job id is taken apart", "[proto][ids]") {
  using job_id::Step;
  for (Step step : {Step::kCompile, Step::kCompileConfirm, Step::kTest, Step::kTestConfirm, Step::kScore,
                    Step::kScoreConfirm, Step::kPromote, Step::kPromoted}) {
    const std::string id = job_id::of("c1/p3", step);
    auto parsed = job_id::parse(id);
    REQUIRE(parsed.has_value());
    CHECK(parsed->program_id == "c1/p3");
    CHECK(parsed->step == step);
  }
  CHECK(job_id::of("c1/p3", Step::kScoreConfirm) == "c1/p3:score-confirm");
  CHECK_FALSE(job_id::parse("c1/p3").has_value());
  CHECK_FALSE(job_id::parse(":score").has_value());
  CHECK_FALSE(job_id::parse("c1/p3:scored").has_value());
  CHECK_FALSE(job_id::parse("dead:c1/p3:test").has_value());
  CHECK_FALSE(job_id::parse("campaign:c1:start").has_value());
  CHECK_FALSE(job_id::parse("ingest:c1").has_value());
}

TEST_CASE("a worker's own dead letter is recognised by its id", "[proto][ids]") {
  ResultMsg r;
  r.job_id = "c1/p3:test";
  r.outcome = std::string(outcome::kFailed);
  r.next.push_back(follow_up(svc::kScore, "dead:c1/p3:test", ""));
  CHECK(is_worker_dead_letter(r));
  r.next[0].job_id = "dead:c1/p3:compile";
  CHECK_FALSE(is_worker_dead_letter(r));
  r.next[0].job_id = "c1/p3:score";
  CHECK_FALSE(is_worker_dead_letter(r));
}

TEST_CASE("campaign ids are 1-128 characters without the separators of job and program ids", "[proto][ids]") {
  using kiln::proto::is_campaign_id;
  CHECK(is_campaign_id("softmax-3f2a9c01de"));
  CHECK(is_campaign_id("bench.cuda_sgemm_1"));
  CHECK(is_campaign_id(std::string(128, 'a')));
  CHECK_FALSE(is_campaign_id(std::string(129, 'a')));
  CHECK_FALSE(is_campaign_id(""));
  for (const char* bad : {"a:b", "a/b", "a#b", "a b", "a\nb", "a\\b"}) CHECK_FALSE(is_campaign_id(bad));
}
