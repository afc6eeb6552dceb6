#include "kiln/llm_bridge/llm_proposer.h"

#include <utility>

#include "kiln/llm/extract.h"
#include "kiln/llm/prompt.h"
#include "kiln/llm_bridge/metrics.h"

namespace kiln::llm_bridge {

namespace {

// The explanation before the code, as the candidate's notes: one line, bounded.
std::string notes_of(const std::string& model, const std::string& content) {
  constexpr size_t kMaxNoteBytes = 200;
  std::string text = content.substr(0, content.find("```"));
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  size_t start = text.find_first_not_of(' ');
  text = start == std::string::npos ? std::string() : text.substr(start);
  if (text.size() > kMaxNoteBytes) text = text.substr(0, kMaxNoteBytes) + "...";
  return "llm " + model + (text.empty() ? "" : ": " + text);
}

// The reply kept as the candidate's raw_llm_code: whole unless it is longer than the bound, then cut
// there without splitting a UTF-8 sequence.
std::string raw_reply_of(const std::string& content) {
  if (content.size() <= proto::kMaxRawLlmCodeBytes) return content;
  size_t keep = proto::kMaxRawLlmCodeBytes;
  while (keep > 0 && (static_cast<unsigned char>(content[keep]) & 0xC0) == 0x80) --keep;
  return content.substr(0, keep);
}

}  // namespace

LlmProposerOptions llm_options_from(const config::LlmConfig& cfg) {
  LlmProposerOptions o;
  o.client.base_url = cfg.base_url;
  o.client.api_key = llm::api_key_from_env(cfg.api_key_env);
  o.client.timeout_s = cfg.timeout_s;
  o.client.total_timeout_s = cfg.total_timeout_s;
  o.client.max_retries = cfg.max_retries;
  o.client.backoff_initial_s = cfg.backoff_initial_s;
  o.client.backoff_max_s = cfg.backoff_max_s;
  o.model = cfg.model;
  o.ensemble = cfg.ensemble;
  o.temperature = cfg.temperature;
  o.max_tokens = cfg.max_tokens;
  o.gpu_name = cfg.gpu_name;
  return o;
}

LlmProposer::LlmProposer(LlmProposerOptions options, llm::Ensemble ensemble,
                         std::shared_ptr<prometheus::Registry> metrics)
    : options_(std::move(options)),
      ensemble_(std::move(ensemble)),
      metrics_(metrics ? std::move(metrics) : std::make_shared<prometheus::Registry>()) {
  requests_ = &llm_requests_family(*metrics_);
  llm::ClientOptions client = options_.client;
  auto* family = requests_;
  client.on_attempt = [family](const std::string& model, std::string_view outcome) {
    family->Add({{"model", model}, {"outcome", std::string(outcome)}}).Increment();
  };
  client_ = std::make_unique<llm::ChatClient>(std::move(client));
}

Result<std::unique_ptr<LlmProposer>> LlmProposer::make(LlmProposerOptions options,
                                                       std::shared_ptr<prometheus::Registry> metrics) {
  KILN_ASSIGN_OR_RETURN(llm::Ensemble ensemble, llm::Ensemble::make(options.ensemble, options.model));
  return std::unique_ptr<LlmProposer>(new LlmProposer(std::move(options), std::move(ensemble), std::move(metrics)));
}

std::string LlmProposer::model() const {
  return ensemble_.models().size() == 1 ? ensemble_.models().front().first : std::string("ensemble");
}

Result<proto::Candidate> LlmProposer::propose(const proto::ProposalRequest& req, const service::TaskPackage& package) {
  ProposalInfo info;
  return propose_with_info(req, package, info);
}

Result<llm::ChatReply> LlmProposer::ask(const std::string& model, std::vector<llm::Message> messages,
                                        ProposalInfo& info) const {
  llm::ChatRequest request;
  request.model = model;
  request.messages = std::move(messages);
  request.temperature = options_.temperature;
  request.max_tokens = options_.max_tokens;
  auto reply = client_->complete(request);
  if (reply.is_ok()) {
    info.prompt_tokens += reply->prompt_tokens;
    info.completion_tokens += reply->completion_tokens;
  }
  return reply;
}

Result<proto::Candidate> LlmProposer::propose_with_info(const proto::ProposalRequest& req,
                                                        const service::TaskPackage& package, ProposalInfo& info) {
  info.requests_counted = true;
  const std::string model = ensemble_.pick(static_cast<uint64_t>(req.seed));
  info.model = model;
  info.metadata["model"] = model;

  // The strategy section: the campaign's fittest, or the built-in one before the first is recorded.
  std::string strategy = req.strategy.text.empty() ? llm::default_strategy() : req.strategy.text;
  std::string prompt_id = req.strategy.prompt_id.empty() ? llm::strategy_id(strategy) : req.strategy.prompt_id;
  std::string parent_prompt_id = req.strategy.prompt_id.empty() ? std::string() : req.strategy.parent_prompt_id;
  bool new_prompt = req.strategy.prompt_id.empty();
  if (req.evolve_prompt) {
    auto rewrite = ask(model, llm::strategy_rewrite_messages(req.strategy, strategy), info);
    auto text = rewrite.is_ok() ? llm::strategy_from_reply(*rewrite) : Result<std::string>(rewrite.status());
    if (text.is_ok() && *text != strategy) {
      // The new section descends from the one it rewrote (recorded first if it never was).
      parent_prompt_id = prompt_id;
      strategy = *text;
      prompt_id = llm::strategy_id(strategy);
      new_prompt = true;
    } else if (!text.is_ok()) {
      info.metadata["prompt_rewrite_error"] = text.status().message();
    }
  }
  info.metadata["prompt_id"] = prompt_id;
  info.metadata["parent_prompt_id"] = parent_prompt_id;
  if (new_prompt) info.metadata["prompt_text"] = strategy;

  llm::PromptContext ctx;
  ctx.gpu_name = options_.gpu_name;
  KILN_ASSIGN_OR_RETURN(std::vector<llm::Message> messages,
                        llm::proposal_messages(req, package.spec, package.files, strategy, ctx));
  KILN_ASSIGN_OR_RETURN(llm::ChatReply reply, ask(model, std::move(messages), info));
  info.raw_reply = raw_reply_of(reply.content);

  // Every region is rewritten, so the rest is the task's kernel, whatever the parent was.
  KILN_ASSIGN_OR_RETURN(std::string code, llm::apply_reply(package.files.at(package.spec.kernel_file).data,
                                                           reply.content, reply.finish_reason));

  proto::Candidate cand;
  cand.program_id = req.program_id;
  cand.parent_id = req.parent.program_id;
  cand.generation = req.parent.generation + 1;
  cand.proposal_index = req.proposal_index;
  cand.proposer = "llm";
  cand.code = std::move(code);
  cand.params = req.parent.params;
  cand.notes = notes_of(model, reply.content);
  return cand;
}

}  // namespace kiln::llm_bridge
