// The LLM proposer: prompt (libs/llm prompt.h) -> Chat Completions -> code extraction -> candidate. Every
// K-th proposal of a campaign (ProposalRequest.evolve_prompt) first asks the model to rewrite the
// strategy section; the new section gets a content-derived id and its parent's id, and the scorer
// records the lineage and the fitness of each section.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <string>

#include "kiln/config/config.h"
#include "kiln/llm/client.h"
#include "kiln/llm_bridge/proposer.h"

namespace kiln::llm_bridge {

struct LlmProposerOptions {
  llm::ClientOptions client;
  std::string model = "gpt-4o-mini";
  std::map<std::string, double> ensemble;  // model -> weight; empty = `model`
  double temperature = 0.7;
  int64_t max_tokens = 4096;
  std::string gpu_name;
};

// From the config's llm section; the API key from the environment variable it names.
LlmProposerOptions llm_options_from(const config::LlmConfig& cfg);

class LlmProposer final : public Proposer {
 public:
  // `metrics` may be null. Registers kiln_llm_requests_total per HTTP attempt.
  static Result<std::unique_ptr<LlmProposer>> make(LlmProposerOptions options,
                                                   std::shared_ptr<prometheus::Registry> metrics);
  std::string model() const override;
  Result<proto::Candidate> propose(const proto::ProposalRequest& req, const service::TaskPackage& package) override;
  Result<proto::Candidate> propose_with_info(const proto::ProposalRequest& req, const service::TaskPackage& package,
                                             ProposalInfo& info) override;

 private:
  LlmProposer(LlmProposerOptions options, llm::Ensemble ensemble, std::shared_ptr<prometheus::Registry> metrics);
  Result<llm::ChatReply> ask(const std::string& model, std::vector<llm::Message> messages, ProposalInfo& info) const;

  LlmProposerOptions options_;
  llm::Ensemble ensemble_;
  std::shared_ptr<prometheus::Registry> metrics_;
  prometheus::Family<prometheus::Counter>* requests_ = nullptr;
  std::unique_ptr<llm::ChatClient> client_;
};

}  // namespace kiln::llm_bridge
