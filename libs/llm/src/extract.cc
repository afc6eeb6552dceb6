#include "kiln/llm/extract.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "kiln/task/task.h"

namespace kiln::llm {

namespace {

bool accepted_language(std::string_view tag) {
  static constexpr std::string_view kTags[] = {"", "cuda", "cpp", "c++", "c", "cu", "cxx", "cc", "hip"};
  return std::find(std::begin(kTags), std::end(kTags), tag) != std::end(kTags);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; });
}

Result<std::string> last_block(std::string_view reply, std::string_view finish_reason, bool any_language) {
  if (blank(reply)) return invalid_argument("empty reply");
  if (finish_reason == "length") return invalid_argument("truncated reply (finish_reason \"length\")");

  struct Block {
    std::string language;
    std::string content;
  };
  std::vector<Block> blocks;
  bool open = false;
  Block current;
  size_t pos = 0;
  while (pos <= reply.size()) {
    size_t eol = reply.find('\n', pos);
    std::string_view line = reply.substr(pos, eol == std::string_view::npos ? std::string_view::npos : eol - pos);
    std::string_view t = trim(line);
    if (t.starts_with("```")) {
      if (!open) {
        open = true;
        current = Block{};
        std::string tag(trim(t.substr(3)));
        std::transform(tag.begin(), tag.end(), tag.begin(), [](unsigned char c) { return std::tolower(c); });
        current.language = tag;
      } else {
        open = false;
        blocks.push_back(std::move(current));
      }
    } else if (open) {
      current.content.append(line);
      current.content.push_back('\n');
    }
    if (eol == std::string_view::npos) break;
    pos = eol + 1;
  }
  if (open) return invalid_argument("truncated reply (unclosed code fence)");
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    if (!any_language && !accepted_language(it->language)) continue;
    if (blank(it->content)) return invalid_argument("empty code block");
    return std::move(it->content);
  }
  return invalid_argument("no fenced code block in the reply");
}

}  // namespace

Result<std::string> last_code_block(std::string_view reply, std::string_view finish_reason) {
  return last_block(reply, finish_reason, false);
}

Result<std::string> last_fenced_block(std::string_view reply, std::string_view finish_reason) {
  return last_block(reply, finish_reason, true);
}

Result<std::string> apply_reply(std::string_view original_kernel, std::string_view reply,
                                std::string_view finish_reason) {
  KILN_ASSIGN_OR_RETURN(std::string block, last_code_block(reply, finish_reason));
  std::string region = block;
  if (block.find(task::kEvolveStart) != std::string::npos || block.find(task::kEvolveEnd) != std::string::npos) {
    auto regions = task::find_regions(block);
    if (!regions.is_ok()) return invalid_argument("code block: " + regions.status().message());
    if (regions->empty()) return invalid_argument("code block: no EVOLVE region");
    region = task::region_text(block, regions->front());
  }
  if (blank(region)) return invalid_argument("empty EVOLVE region in the code block");
  auto replaced = task::replace_region(original_kernel, region, 0);
  if (!replaced.is_ok()) return replaced.status().with_context("the original kernel");
  return replaced;
}

}  // namespace kiln::llm
