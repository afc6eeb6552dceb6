#include "kiln/llm/extract.h"

#include <algorithm>
#include <cctype>
#include <utility>
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
  auto wanted = task::find_regions(original_kernel);
  if (!wanted.is_ok()) return wanted.status().with_context("the original kernel");
  std::vector<std::string> bodies;
  if (block.find(task::kEvolveStart) != std::string::npos || block.find(task::kEvolveEnd) != std::string::npos) {
    auto found = task::region_bodies(block);
    if (!found.is_ok()) return invalid_argument("code block: " + found.status().message());
    bodies = std::move(found).value();
  } else if (wanted->size() == 1) {
    bodies.push_back(std::move(block));
  } else {
    return invalid_argument("the code block has no [EVOLVE_START] / [EVOLVE_END] markers, but the kernel has " +
                            std::to_string(wanted->size()) + " editable regions: each needs its own pair");
  }
  if (bodies.size() != wanted->size())
    return invalid_argument("the code block has " + std::to_string(bodies.size()) + " editable region(s), the kernel " +
                            std::to_string(wanted->size()));
  for (size_t i = 0; i < bodies.size(); ++i) {
    if (blank(bodies[i]))
      return invalid_argument("empty EVOLVE region in the code block" +
                              (bodies.size() > 1 ? " (region " + std::to_string(i + 1) + ")" : std::string()));
  }
  auto spliced = task::splice_regions(original_kernel, bodies);
  if (!spliced.is_ok()) return spliced.status().with_context("the original kernel");
  return spliced;
}

}  // namespace kiln::llm
