// Prompts for kernel proposals and for rewriting a strategy section (meta-prompt evolution).
//
// A proposal prompt is a system message (the role, the rules of the editable region, the strategy
// section) and a user message with, in order: the task (reference source, inputs and outputs with
// their shapes and dtypes, cases, instructions.md), the hardware, the parent's code and its eval_log,
// the inspirations (other cells' programs with their scores), and the target cell.
#pragma once

#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/llm/client.h"
#include "kiln/proto/payloads.h"
#include "kiln/task/task.h"

namespace kiln::llm {

// The built-in strategy section, used until the campaign has evolved one.
const std::string& default_strategy();

// Content-derived strategy id: "s-" + the first 12 hex digits of sha256(text).
std::string strategy_id(const std::string& text);

struct PromptContext {
  std::string gpu_name;  // CUDA: the target GPU's name (hardware table key)
};

// The messages for one proposal on the task `spec`, parsed from `files` (the request's package, parsed
// once by the caller). Fails only when `files` lacks the kernel or reference `spec` names.
Result<std::vector<Message>> proposal_messages(const proto::ProposalRequest& req, const task::TaskSpec& spec,
                                               const proto::FileMap& files, const std::string& strategy,
                                               const PromptContext& ctx);

// The messages that ask for a rewritten strategy section, given how the current one has scored.
std::vector<Message> strategy_rewrite_messages(const proto::PromptStrategy& current, const std::string& current_text);

// The new strategy text from a rewrite reply: the fenced block if there is one, else the reply trimmed.
// Errors: an empty, truncated or oversized reply.
Result<std::string> strategy_from_reply(const ChatReply& reply);

}  // namespace kiln::llm
