// Code extraction from an LLM reply: the last fenced code block (```cuda, ```cpp, ```c++, ```c, ```cu or
// a bare ```). The model is asked for the new bodies of the kernel's editable regions: when the block
// holds [EVOLVE_START] / [EVOLVE_END] markers, the text between each pair is the new body of the region
// in that position (one pair per region of the kernel; text outside the pairs is ignored); a kernel with
// one region also takes a block without markers as its body. The bodies are spliced into the task's
// kernel (task::splice_regions), so everything outside the regions stays the task's.
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

// `original_kernel` with every editable region replaced by what the reply proposes.
Result<std::string> apply_reply(std::string_view original_kernel, std::string_view reply,
                                std::string_view finish_reason = "stop");

}  // namespace kiln::llm
