// Code extraction from an LLM reply: the last fenced code block (```cuda, ```cpp, ```c++, ```c, ```cu or
// a bare ```). When the block holds the [EVOLVE_START] / [EVOLVE_END] markers, the region between them
// is taken; otherwise the whole block is the region's new content. Only the editable region of the
// original kernel is replaced (task::replace_region); everything else stays the task's.
#pragma once

#include <string>
#include <string_view>

#include "kiln/core/status.h"

namespace kiln::llm {

// The last accepted fenced block's content. Errors (kInvalidArgument, the reason as the message):
// "empty reply", "truncated reply (finish_reason \"length\")", "truncated reply (unclosed code fence)",
// "no fenced code block in the reply", "empty code block".
Result<std::string> last_code_block(std::string_view reply, std::string_view finish_reason = "stop");

// The same for a block in any language (```markdown ...): strategy rewrites.
Result<std::string> last_fenced_block(std::string_view reply, std::string_view finish_reason = "stop");

// The kernel with its first editable region replaced by what the reply proposes.
Result<std::string> apply_reply(std::string_view original_kernel, std::string_view reply,
                                std::string_view finish_reason = "stop");

}  // namespace kiln::llm
