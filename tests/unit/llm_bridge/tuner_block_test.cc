// The tuner beyond exhaustive enumeration: disjoint sample blocks, the pick nearest to the parent.
#include <catch2/catch.hpp>

#include <set>

#include "kiln/testing/campaign_fixtures.h"
#include "kiln/archive/archive.h"
#include "kiln/llm_bridge/proposer.h"
#include "proposing.h"

using namespace kiln;

TEST_CASE("sample blocks are disjoint, deterministic and never hold program 0", "[llm_bridge][tuner]") {
  CHECK(llm_bridge::tuner_block_size(9, 8) == 1);  // the space fits the budget: one each
  CHECK(llm_bridge::tuner_block_size(101, 40) == 2);
  CHECK(llm_bridge::tuner_block_size(1 << 20, 4) == 4);  // capped
  CHECK(llm_bridge::tuner_block_size(100, 0) == 1);      // budget unknown

  const uint64_t size = 97;
  std::set<uint64_t> seen;
  for (int64_t k = 1;; ++k) {
    auto block = llm_bridge::tuner_block(size, 5, k, 4);
    if (!block.is_ok()) {
      CHECK(block.status().code() == StatusCode::kResourceExhausted);
      break;
    }
    CHECK(*block == *llm_bridge::tuner_block(size, 5, k, 4));
    for (uint64_t i : *block) {
      CHECK(i != 0);
      CHECK(seen.insert(i).second);
    }
  }
  CHECK(seen.size() == size - 1);  // the blocks cover the space, the last one short
}

TEST_CASE("the tuner takes the combination of its block nearest to a measured parent", "[llm_bridge][tuner]") {
  // 5 x 5 x 4 = 100 combinations, budget 10: blocks of 4 (capped).
  proto::ProposalRequest req;
  req.files =
      kiln::testing::task_files("cpu", "params:\n  A: [1, 2, 3, 4, 5]\n  B: [1, 2, 3, 4, 5]\n  C: [1, 2, 3, 4]\n");
  req.parent.campaign_id = "c1";
  req.parent.program_id = "c1/p2";
  req.parent.params = {{"A", "5"}, {"B", "5"}, {"C", "4"}};
  req.parent_eval_log = "correct: 10 us";
  req.budget = 10;
  req.tuner_blocks = true;
  llm_bridge::TunerProposer tuner;
  auto space = llm_bridge::ParamSpace::make(
      {{"A", {"1", "2", "3", "4", "5"}}, {"B", {"1", "2", "3", "4", "5"}}, {"C", {"1", "2", "3", "4"}}});
  REQUIRE(space.is_ok());
  std::set<std::map<std::string, std::string>> picked;
  for (int64_t k = 1; k <= 10; ++k) {
    req.program_id = "c1/p" + std::to_string(k + 2);
    req.proposal_index = k;
    auto cand = kiln::testing::propose(tuner, req);
    REQUIRE(cand.is_ok());
    CHECK(picked.insert(cand->params).second);
    // Even proposals: the first of the block at the smallest distance from the parent; odd: the first.
    auto block = llm_bridge::tuner_block(space->size(), kiln::seed_from("c1"), k, 4);
    REQUIRE(block.is_ok());
    CHECK(block->size() == 4);
    uint64_t expected = block->front();
    if (k % 2 == 0)
      for (uint64_t i : *block)
        if (space->distance(i, req.parent.params) < space->distance(expected, req.parent.params)) expected = i;
    CHECK(space->combination(expected) == cand->params);
  }
  // Unmeasured parent (program 0 before its score): the block's first element, even for an even proposal.
  req.parent_eval_log.clear();
  req.proposal_index = 2;
  auto first = kiln::testing::propose(tuner, req);
  REQUIRE(first.is_ok());
  auto block = llm_bridge::tuner_block(space->size(), kiln::seed_from("c1"), 2, 4);
  REQUIRE(block.is_ok());
  CHECK(first->params == space->combination(block->front()));
}
