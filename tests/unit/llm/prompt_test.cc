#include "kiln/llm/prompt.h"

#include <catch2/catch.hpp>

#include "kiln/testing/campaign_fixtures.h"
#include "kiln/archive/scoring.h"
#include "kiln/llm/hardware.h"

using namespace kiln;

namespace {

// The prompt for `req` on the package it carries, parsed here as the llm-bridge parses it at its edge.
Result<std::vector<llm::Message>> prompt_for(const proto::ProposalRequest& req, const std::string& gpu_name = "") {
  auto spec = task::parse_task(req.files);
  REQUIRE(spec.is_ok());
  return llm::proposal_messages(req, *spec, req.files, llm::default_strategy(), {gpu_name});
}

}  // namespace

TEST_CASE("a proposal prompt carries task, hardware, parent, feedback, inspirations and target", "[llm]") {
  proto::ProposalRequest req;
  req.files = kiln::testing::task_files();
  req.files["instructions.md"].data = "Mind the tail of each row.\n";
  req.parent.program_id = "c1/p3";
  req.parent.code = req.files["kernel.cpp"].data;
  req.parent_eval_log = "wrong values: y[1] got 2 expected 1";
  req.parent_cell = "memory=0,compute=1";
  req.target_cell = "memory=1,compute=1";
  proto::Inspiration insp;
  insp.cand.program_id = "c1/p2";
  insp.cand.code = "// [EVOLVE_START]\nint inspired;\n// [EVOLVE_END]\n";
  insp.combined_score = 6.5;
  req.inspirations.push_back(insp);

  auto msgs = prompt_for(req);
  REQUIRE(msgs.is_ok());
  REQUIRE(msgs->size() == 2);
  const std::string& system = (*msgs)[0].content;
  const std::string& user = (*msgs)[1].content;
  CHECK(system.find("## Strategy") != std::string::npos);
  CHECK(system.find("[EVOLVE_START]") != std::string::npos);
  for (const char* part : {"input x: fp32 [B, H]", "B=16,H=4096", "## Reference (reference.cpp)",
                           "Mind the tail of each row.", "CPU: ", "c1/p3", "wrong values: y[1]", "c1/p2",
                           "int inspired;", "score 6.500", "memory=1,compute=1", "BLOCK in {64,128,256}"}) {
    INFO(part);
    CHECK(user.find(part) != std::string::npos);
  }
}

TEST_CASE("a kernel with two regions is asked for both", "[llm][regions]") {
  proto::ProposalRequest req;
  req.files = kiln::testing::task_files();
  std::string& kernel = req.files["kernel.cpp"].data;
  kernel += "// [EVOLVE_START]\nstatic int second_region;\n// [EVOLVE_END]\n";
  proto::Inspiration insp;
  insp.cand.program_id = "c1/p2";
  insp.cand.code = kernel;
  req.inspirations.push_back(insp);

  auto msgs = prompt_for(req);
  REQUIRE(msgs.is_ok());
  const std::string& system = (*msgs)[0].content;
  const std::string& user = (*msgs)[1].content;
  CHECK(system.find("The kernel has 2 editable regions") != std::string::npos);
  CHECK(system.find("content of all 2 editable regions, in order, each between its own") != std::string::npos);
  CHECK(user.find("Write the new content of all 2 editable regions now") != std::string::npos);
  // An inspiration shows both of its regions, each between its markers.
  CHECK(user.find("// [EVOLVE_START]\n  (void)a;\n// [EVOLVE_END]\n// [EVOLVE_START]\nstatic int second_region;\n"
                  "// [EVOLVE_END]\n") != std::string::npos);

  proto::ProposalRequest single;
  single.files = kiln::testing::task_files();
  auto one = prompt_for(single);
  REQUIRE(one.is_ok());
  CHECK((*one)[0].content.find("editable regions") == std::string::npos);
  CHECK((*one)[1].content.find("Write the new editable region now.") != std::string::npos);
}

TEST_CASE("a prompt names what the package lacks", "[llm]") {
  proto::ProposalRequest req;
  req.files = kiln::testing::task_files();
  auto spec = task::parse_task(req.files);
  REQUIRE(spec.is_ok());
  proto::FileMap no_kernel = req.files;
  no_kernel.erase(spec->kernel_file);
  auto msgs = llm::proposal_messages(req, *spec, no_kernel, llm::default_strategy(), {});
  REQUIRE_FALSE(msgs.is_ok());
  CHECK(msgs.status().message() == "prompt: the task package has no kernel.cpp");
}

TEST_CASE("GPU figures come from a table keyed by name", "[llm]") {
  auto h200 = llm::gpu_spec("NVIDIA H200");
  REQUIRE(h200);
  CHECK(h200->sm_count == 132);
  CHECK(h200->shared_bytes_per_sm == 228 * 1024);
  CHECK(llm::gpu_spec("nvidia-h100-pcie")->sm_count == 114);
  CHECK_FALSE(llm::gpu_spec("Imaginary 9000"));
  CHECK(llm::hardware_summary(proto::Backend::kCuda, "NVIDIA H200").find("132 SMs") != std::string::npos);
  CHECK(llm::hardware_summary(proto::Backend::kCuda, "Imaginary 9000").find("no figures") != std::string::npos);
}

TEST_CASE("strategy rewrites ask with the fitness history and take the fenced section", "[llm]") {
  proto::PromptStrategy s;
  s.prompt_id = "s-abc";
  s.uses = 3;
  s.fitness = 7.25;
  s.history = {1, 7.25, 0};
  auto msgs = llm::strategy_rewrite_messages(s, llm::default_strategy());
  CHECK(msgs[1].content.find("1.000, 7.250, 0.000") != std::string::npos);
  CHECK(msgs[0].content.find("strategy section") != std::string::npos);
  llm::ChatReply reply;
  reply.content = "Sure:\n```markdown\n## Strategy\n- Tile.\n```\n";
  auto text = llm::strategy_from_reply(reply);
  REQUIRE(text.is_ok());
  CHECK(*text == "## Strategy\n- Tile.\n");
  reply.finish_reason = "length";
  CHECK_FALSE(llm::strategy_from_reply(reply).is_ok());
  CHECK(llm::strategy_id("a") == llm::strategy_id("a"));
  CHECK(llm::strategy_id("a") != llm::strategy_id("b"));
}

TEST_CASE("the parent's Nsight Compute profile reaches the next proposal's prompt", "[llm][profile]") {
  proto::Candidate parent;
  parent.campaign_id = "c1";
  parent.program_id = "c1/p3";
  proto::ScoreResult scored = kiln::testing::test_result(parent, proto::TestStatus::kOk, 2.0, 1.9, 2.1);
  scored.test.profile = {{"kernels", 1}, {"dram_pct", 81}, {"sm_pct", 12}, {"limiter", 1}};
  scored.test.profile_summary = "profile on B=16,H=4096: 1 kernel, 120.3 us: dram 81 %, sm 12 % of peak: memory bound";
  proto::ProposalRequest req;
  req.files = kiln::testing::task_files();
  req.parent.program_id = "c1/p3";
  req.parent.code = req.files["kernel.cpp"].data;
  req.parent_eval_log = archive::evaluate(scored).eval_log;  // what the scorer stores and sends
  auto msgs = prompt_for(req, "NVIDIA H200");
  REQUIRE(msgs.is_ok());
  CHECK((*msgs)[1].content.find(scored.test.profile_summary) != std::string::npos);
}
