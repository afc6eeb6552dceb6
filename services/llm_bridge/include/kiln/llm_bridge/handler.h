// The "propose" service: a ProposalRequest in, the candidate's compile job out. A proposal that fails is
// answered by messaging::outcome_for: when it is the proposal's own failure (the reply held no usable code,
// the tuner's space is used up) the job answers with a ScoreResult (stage "propose"), which the scorer
// records as perf_score 0; a proposer that cannot be reached now (a timeout, a rate limit, a server error) is
// given back; a permanent fault that is not the proposal's (an unknown proposer, a task package that does not
// parse, a refused API key) is dead-lettered, and the scorer records the candidate as not evaluated.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <string>

#include "kiln/core/status.h"
#include "kiln/llm_bridge/proposer.h"
#include "kiln/messaging/handler.h"
#include "kiln/proto/wire.h"
#include "kiln/service/service.h"

namespace kiln::llm_bridge {

struct ProposeOptions {
  std::string cuda_arch = "sm_90";  // compile target for CUDA tasks; CPU tasks build for "native"
};

class ProposeHandler {
 public:
  // `metrics` may be null (a private registry is used then).
  ProposeHandler(ProposeOptions options, std::shared_ptr<prometheus::Registry> metrics);

  // Registers a proposer under the name ProposalRequest.proposer uses ("tuner", "llm"). Set up before
  // the first job: handle() reads the table from several worker threads without a lock.
  void add(const std::string& name, std::unique_ptr<Proposer> proposer);
  // Where task packages named by blob come from (default: inline packages only). Set up before the first job.
  void set_task_source(std::shared_ptr<service::TaskSource> tasks) { tasks_ = std::move(tasks); }

  // Thread-safe (the service runs `slots` jobs at once).
  messaging::JobOutcome handle(const proto::Job& job);

 private:
  // The answer to a proposal that ended with `fault`, as outcome_for reads it.
  messaging::JobOutcome propose_failed(const proto::ProposalRequest& req, const ProposalInfo& info,
                                       const Status& fault);
  // Token counters and Candidate.metadata from what the proposer reported.
  void account(const ProposalInfo& info, std::map<std::string, std::string>& metadata);

  ProposeOptions options_;
  std::shared_ptr<prometheus::Registry> metrics_;
  prometheus::Family<prometheus::Counter>* requests_ = nullptr;
  prometheus::Family<prometheus::Counter>* tokens_ = nullptr;
  std::map<std::string, std::unique_ptr<Proposer>> proposers_;
  std::shared_ptr<service::TaskSource> tasks_ = std::make_shared<service::TaskSource>();
};

// Handler factory for services/llm_bridge/main.cc: the tuner and the LLM proposer (the config's llm
// section), slots from llm_bridge.slots, the CUDA arch from compiler.cuda_arch.
Result<service::ServiceHandlers> make_propose_handlers(const service::ServiceContext& ctx);

}  // namespace kiln::llm_bridge
