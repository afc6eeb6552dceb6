// A whole LLM campaign through the real llm-bridge handler (LLM proposer, HTTP to a scripted fake
// OpenAI-compatible server) and the real scorer engine; the driver plays compiler and tester.
#include <stdlib.h>

#include <catch2/catch.hpp>

#include <map>

#include "kiln/testing/campaign_fixtures.h"
#include "kiln/testing/fake_openai.h"
#include "kiln/core/files.h"
#include "kiln/llm_bridge/handler.h"
#include "kiln/llm_bridge/llm_proposer.h"
#include "kiln/scorer/handler.h"
#include "kiln/task/task.h"
#include "kiln/testing/metric_value.h"

using namespace kiln;
using kiln::testing::FakeOpenAI;
using kiln::testing::FakeReply;
using kiln::testing::kernel_reply;
using kiln::testing::metric_value;

namespace {

proto::Job as_job(const std::string& service, const std::string& id, const std::string& payload) {
  proto::Job j;
  j.job_id = id;
  j.service = service;
  j.payload.data = payload;
  return j;
}

// The pretend compiler and tester: a marker in the code decides the outcome.
proto::ScoreResult measure(const proto::Candidate& c, bool) {
  if (c.code.find("COMPILE_ERROR") != std::string::npos)
    return kiln::testing::build_failed(c, "kernel.cpp:4:3: error: 'COMPILE_ERROR' was not declared in this scope");
  double speedup = 1.02;
  if (c.code.find("omp parallel") != std::string::npos)
    speedup = 2.0;
  else if (c.code.find("unroll") != std::string::npos)
    speedup = 1.4;
  return kiln::testing::correct(c, speedup, speedup - 0.5, speedup + 0.1);
}

}  // namespace

TEST_CASE("an LLM campaign turns every scripted reply into the right result", "[llm_bridge][llm][campaign]") {
  FakeOpenAI server;
  FakeReply slow = kernel_reply("  (void)a; // slow\n");
  slow.delay_s = 1.0;
  FakeReply truncated = kernel_reply("  (void)a;\n");
  truncated.finish_reason = "length";
  FakeReply prose{200, "Try vectorizing the loop.", "stop", 30, 7};
  server.script({
      kernel_reply("#pragma omp parallel for\n  for (int i = 0; i < 1; ++i) (void)a;\n"),  // p1: good
      kernel_reply("  COMPILE_ERROR;\n"),                                                  // p2: does not build
      truncated,                                                                           // p3: truncated
      FakeReply{429},                                                                      // p4: 429, then
      kernel_reply("#pragma GCC unroll 4\n  for (int i = 0; i < 1; ++i) (void)a;\n"),      //     success
      slow, slow,                                                                          // p5: timeouts:
      kernel_reply("  (void)a; // second attempt\n"),                                      //     given back
      prose,                                                                               // p6: no code
  });

  ::setenv("KILN_TEST_FAKE_KEY", "sk-fake", 1);
  config::LlmConfig cfg;
  cfg.base_url = server.base_url();
  cfg.model = "fake-coder";
  cfg.api_key_env = "KILN_TEST_FAKE_KEY";
  cfg.timeout_s = 0.3;
  cfg.max_retries = 1;
  cfg.backoff_initial_s = 0.01;
  auto registry = std::make_shared<prometheus::Registry>();
  auto llm = llm_bridge::LlmProposer::make(llm_bridge::llm_options_from(cfg), registry);
  REQUIRE(llm.is_ok());
  ::unsetenv("KILN_TEST_FAKE_KEY");
  llm_bridge::ProposeHandler bridge({}, registry);
  bridge.add("llm", std::move(llm).value());

  TempDir dir("kiln-llm-campaign");
  scorer::EngineOptions options;
  options.prompt_evolution_interval = 3;
  auto opened = scorer::ScorerHandler::open(dir.path() + "/archive.db", options, nullptr);
  REQUIRE(opened.is_ok());
  std::unique_ptr<scorer::ScorerHandler> scorer = std::move(opened).value();

  kiln::testing::Driver driver(
      [&](const std::string& id, const std::string& payload) {
        messaging::JobOutcome out = scorer->handle_job(as_job("score", id, payload));
        INFO(id << ": " << out.error);
        CHECK(out.outcome == messaging::Outcome::kDone);
        return out.next;
      },
      measure);
  int given_back = 0;
  driver.set_propose([&](const proto::FollowUp& f) {
    CHECK(f.service == "propose");
    proto::Job job = as_job(f.service, f.job_id, f.payload.data);
    messaging::JobOutcome out = bridge.handle(job);
    // A proposer that could not be reached: the job goes back to the queue and is attempted again.
    while (out.outcome == messaging::Outcome::kRetry && job.attempt < 3) {
      ++given_back;
      ++job.attempt;
      out = bridge.handle(job);
    }
    INFO(f.job_id << ": " << out.error);
    // Code, or the proposal's own failure (no code) for the scorer: nothing here is dead-lettered.
    CHECK((out.outcome == messaging::Outcome::kDone || out.outcome == messaging::Outcome::kCandidateFault));
    return out.next;
  });
  auto start = kiln::testing::campaign_start("c1", 6, 1);
  start.proposer = "llm";
  const uint64_t parses = task::parse_count();
  driver.submit("c1:start", proto::encode(start));
  driver.run();
  REQUIRE(driver.idle());
  // One parse of the package per process: the scorer's at the start, the bridge's at its first proposal.
  CHECK(task::parse_count() - parses == 2);
  CHECK(server.scripted_left() == 0);

  auto info = scorer->engine().campaign("c1");
  REQUIRE(info.is_ok());
  CHECK(info->state == "done");
  CHECK(info->proposed == 6);
  CHECK(info->scored == 7);

  proto::CampaignQuery q;
  q.campaign_id = "c1";
  q.top = 10;
  auto best = scorer->engine().best(q);
  REQUIRE(best.is_ok());
  std::map<std::string, proto::Program> by_id;
  for (const auto& p : best->programs) by_id[p.id] = p;
  REQUIRE(by_id.size() == 7);

  const proto::Program& p1 = by_id["c1/p1"];
  CHECK(p1.eval.perf_score == 5);
  CHECK(p1.eval.runtime_improvement == Approx(2.0));
  CHECK(p1.code.find("#pragma omp parallel for") != std::string::npos);
  CHECK(p1.code.find("extern \"C\" int kiln_entry") != std::string::npos);  // outside the region: the task's
  CHECK(p1.metadata.at("model") == "fake-coder");
  CHECK(p1.metadata.at("prompt_tokens") == "100");
  CHECK(p1.metadata.at("cell") == "memory=0,compute=0,parallelism=1,registers=0,shared_memory=0");
  CHECK(best->programs.front().id == "c1/p1");
  // The model's answer as it came, before the region was taken out of it, and the task it was for.
  CHECK(p1.raw_llm_code ==
        "Here is a faster version.\n```cpp\n// [EVOLVE_START]\n#pragma omp parallel for\n"
        "  for (int i = 0; i < 1; ++i) (void)a;\n// [EVOLVE_END]\n```\n");
  CHECK(p1.task.name == "scale_test");
  CHECK(p1.task.task_id == "t-c1");
  CHECK(p1.task.op == "scale");
  CHECK(by_id["c1/p0"].raw_llm_code.empty());  // program 0 was never proposed

  CHECK(by_id["c1/p2"].eval.perf_score == 1);
  CHECK(by_id["c1/p2"].eval.eval_log.find("COMPILE_ERROR") != std::string::npos);

  CHECK(by_id["c1/p3"].eval.perf_score == 0);
  CHECK(by_id["c1/p3"].eval.eval_log.find("truncated reply (finish_reason \"length\")") != std::string::npos);
  CHECK(by_id["c1/p3"].metadata.at("completion_tokens") == "70");  // rewrite (20) + the truncated reply (50)

  CHECK(by_id["c1/p4"].eval.perf_score == 5);
  CHECK(by_id["c1/p4"].eval.runtime_improvement == Approx(1.4));

  // Two timeouts are the server's trouble, not the proposal's: given back once, then measured.
  CHECK(given_back == 1);
  CHECK(by_id["c1/p5"].eval.perf_score == 5);
  CHECK(by_id["c1/p5"].code.find("second attempt") != std::string::npos);

  CHECK(by_id["c1/p6"].eval.perf_score == 0);
  CHECK(by_id["c1/p6"].eval.eval_log.find("no fenced code block") != std::string::npos);
  // Nothing could be extracted, and what the model said instead is kept.
  CHECK(by_id["c1/p6"].raw_llm_code == "Try vectorizing the loop.");
  CHECK(by_id["c1/p3"].raw_llm_code.find("[EVOLVE_START]") != std::string::npos);  // the truncated reply

  // Tokens: six answered kernel requests and two strategy rewrites (p3, p6).
  CHECK(server.rewrites() == 2);
  const int64_t prompt_tokens = 5 * 100 + 30 + 2 * 40;
  const int64_t completion_tokens = 5 * 50 + 7 + 2 * 20;
  CHECK(info->prompt_tokens == prompt_tokens);
  CHECK(info->completion_tokens == completion_tokens);
  CHECK(metric_value(*registry, "kiln_llm_tokens_total", {{"model", "fake-coder"}, {"direction", "prompt"}}) ==
        Approx(prompt_tokens));
  CHECK(metric_value(*registry, "kiln_llm_tokens_total", {{"model", "fake-coder"}, {"direction", "completion"}}) ==
        Approx(completion_tokens));
  CHECK(metric_value(*registry, "kiln_llm_requests_total", {{"model", "fake-coder"}, {"outcome", "rate_limited"}}) ==
        1);
  CHECK(metric_value(*registry, "kiln_llm_requests_total", {{"model", "fake-coder"}, {"outcome", "timeout"}}) == 2);
  CHECK(metric_value(*registry, "kiln_llm_requests_total", {{"model", "fake-coder"}, {"outcome", "ok"}}) == 8);
  for (const auto& auth : server.authorization()) CHECK(auth == "Bearer sk-fake");

  // Meta-prompts: the built-in strategy and its rewrite, with lineage.
  CHECK(info->prompts == 2);
  const std::string base = p1.metadata.at("prompt_id");
  const proto::Program& p3 = by_id["c1/p3"];
  CHECK(p3.metadata.at("parent_prompt_id") == base);
  CHECK(p3.metadata.at("prompt_lineage") == p3.metadata.at("prompt_id") + "," + base);
  CHECK(by_id["c1/p4"].metadata.at("prompt_id") == base);  // the fittest strategy is used again
  // The prompts carry the target cell and the inspirations from the archive.
  auto requests = server.requests();
  bool saw_direction = false;
  for (const auto& r : requests) {
    std::string user = r["messages"][1]["content"];
    if (user.find("## Direction") != std::string::npos) saw_direction = true;
  }
  CHECK(saw_direction);
  CHECK(info->cells_filled >= 2);
}
