#include <catch2/catch.hpp>

#include <set>

#include "kiln/testing/campaign_fixtures.h"
#include "kiln/llm_bridge/proposer.h"
#include "proposing.h"

using namespace kiln;
using llm_bridge::ParamSpace;
using llm_bridge::tuner_combination;

namespace {

proto::ProposalRequest request(const std::string& campaign, int64_t index,
                               proto::FileMap files = kiln::testing::task_files()) {
  proto::ProposalRequest req;
  req.parent.campaign_id = campaign;
  req.parent.program_id = campaign + "/p0";
  req.parent.code = files.at(files.count("kernel.cu") ? "kernel.cu" : "kernel.cpp").data;
  req.parent.params = {{"BLOCK", "64"}, {"VEC", "1"}};
  req.program_id = campaign + "/p" + std::to_string(index);
  req.proposal_index = index;
  req.proposer = "tuner";
  req.files = std::move(files);
  return req;
}

}  // namespace

TEST_CASE("the parameter space is indexed in mixed radix, last parameter fastest", "[llm_bridge][tuner]") {
  auto space = ParamSpace::make({{"BLOCK", {"64", "128", "256"}}, {"VEC", {"1", "2", "4"}}});
  REQUIRE(space.is_ok());
  CHECK(space->size() == 9);
  using Combo = std::map<std::string, std::string>;
  CHECK(space->combination(0) == Combo{{"BLOCK", "64"}, {"VEC", "1"}});
  CHECK(space->combination(1) == Combo{{"BLOCK", "64"}, {"VEC", "2"}});
  CHECK(space->combination(3) == Combo{{"BLOCK", "128"}, {"VEC", "1"}});
  CHECK(space->combination(8) == Combo{{"BLOCK", "256"}, {"VEC", "4"}});

  auto empty = ParamSpace::make({});
  REQUIRE(empty.is_ok());
  CHECK(empty->size() == 1);
  CHECK(empty->combination(0).empty());

  std::vector<std::pair<std::string, std::vector<std::string>>> huge;
  for (int i = 0; i < 41; ++i) huge.push_back({"P" + std::to_string(i), {"0", "1"}});
  CHECK(ParamSpace::make(huge).status().code() == StatusCode::kResourceExhausted);
}

TEST_CASE("the tuner's permutation covers the space once and never program 0", "[llm_bridge][tuner]") {
  // Small spaces are shuffled, large ones (over 4096 untried) use the affine bijection: cover both.
  for (uint64_t size :
       {uint64_t{1}, uint64_t{2}, uint64_t{9}, uint64_t{100}, uint64_t{4097}, uint64_t{4098}, uint64_t{20000}}) {
    for (uint64_t seed : {uint64_t{1}, uint64_t{0xdeadbeef}}) {
      INFO("size " << size << " seed " << seed);
      std::set<uint64_t> seen;
      for (int64_t i = 1; i < static_cast<int64_t>(size); ++i) {
        auto idx = tuner_combination(size, seed, i);
        REQUIRE(idx.is_ok());
        REQUIRE(*idx >= 1);
        REQUIRE(*idx < size);
        seen.insert(*idx);
      }
      CHECK(seen.size() == size - 1);
      auto past = tuner_combination(size, seed, static_cast<int64_t>(size));
      CHECK(past.status().code() == StatusCode::kResourceExhausted);
      CHECK(past.status().message().find("parameter space exhausted") == 0);
    }
  }
  CHECK(tuner_combination(9, 1, 0).status().code() == StatusCode::kInvalidArgument);

  // The order depends on the seed and nothing else.
  std::vector<uint64_t> a, b, c;
  for (int64_t i = 1; i < 100; ++i) {
    a.push_back(*tuner_combination(100, 7, i));
    b.push_back(*tuner_combination(100, 7, i));
    c.push_back(*tuner_combination(100, 8, i));
  }
  CHECK(a == b);
  CHECK(a != c);
}

TEST_CASE("tuner proposals keep the parent's code and walk the untried combinations", "[llm_bridge][tuner]") {
  llm_bridge::TunerProposer tuner;
  CHECK(tuner.model() == "tuner");
  std::set<std::map<std::string, std::string>> combos = {{{"BLOCK", "64"}, {"VEC", "1"}}};  // program 0's
  for (int64_t i = 1; i <= 8; ++i) {
    proto::ProposalRequest req = request("c1", i);
    auto cand = kiln::testing::propose(tuner, req);
    REQUIRE(cand.is_ok());
    CHECK(cand->program_id == req.program_id);
    CHECK(cand->campaign_id == "c1");
    CHECK(cand->parent_id == "c1/p0");
    CHECK(cand->generation == 1);
    CHECK(cand->proposal_index == i);
    CHECK(cand->proposer == "tuner");
    CHECK(cand->code == req.parent.code);
    CHECK(cand->notes == "tuner: BLOCK=" + cand->params.at("BLOCK") + " VEC=" + cand->params.at("VEC"));
    CHECK(combos.insert(cand->params).second);  // never a repeat, never program 0's
  }
  CHECK(combos.size() == 9);  // the whole space
  auto exhausted = kiln::testing::propose(tuner, request("c1", 9));
  CHECK(exhausted.status().message().find("parameter space exhausted") == 0);

  SECTION("the combination depends on the campaign and index, not on the parent") {
    proto::ProposalRequest other = request("c1", 3);
    other.parent.program_id = "c1/p2";
    other.parent.generation = 4;
    other.parent.code = "// a different parent\n" + other.parent.code;
    auto from_other = kiln::testing::propose(tuner, other);
    REQUIRE(from_other.is_ok());
    CHECK(from_other->params == kiln::testing::propose(tuner, request("c1", 3))->params);
    CHECK(from_other->code == other.parent.code);
    CHECK(from_other->generation == 5);
    CHECK(from_other->parent_id == "c1/p2");
  }
  SECTION("another campaign walks another order") {
    std::vector<std::map<std::string, std::string>> mine, theirs;
    for (int64_t i = 1; i <= 8; ++i) {
      mine.push_back(kiln::testing::propose(tuner, request("c1", i))->params);
      theirs.push_back(kiln::testing::propose(tuner, request("other-campaign", i))->params);
    }
    CHECK(mine != theirs);
  }
  SECTION("a task without params has nothing to tune") {
    auto none = kiln::testing::propose(tuner, request("c2", 1, kiln::testing::task_files("cpu", "")));
    CHECK(none.status().message().find("parameter space exhausted") == 0);
  }
}
