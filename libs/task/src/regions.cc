// Editable regions: the [EVOLVE_START] / [EVOLVE_END] convention of KernelFoundry task packages.
#include "kiln/task/task.h"


namespace kiln::task {

namespace {

struct Line {
  size_t begin = 0;  // first byte
  size_t end = 0;    // one past the last byte, before '\n'
  size_t next = 0;   // first byte of the following line
};

std::string_view trim_left(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

// A marker only counts inside a comment that starts its line, so code that happens to mention the
// marker in a string literal can never open a region by accident.
bool starts_with_comment(std::string_view line) {
  std::string_view t = trim_left(line);
  return t.starts_with("//") || t.starts_with("/*") || t.starts_with("*");
}

}  // namespace

Result<std::vector<Region>> find_regions(std::string_view source) {
  std::vector<Region> regions;
  size_t open_line = 0;  // 1-based line of the pending start marker; 0 = no region open
  Region pending;
  size_t line_no = 0;
  for (size_t pos = 0; pos < source.size();) {
    Line ln;
    ln.begin = pos;
    size_t nl = source.find('\n', pos);
    ln.end = nl == std::string_view::npos ? source.size() : nl;
    ln.next = nl == std::string_view::npos ? source.size() : nl + 1;
    pos = ln.next;
    ++line_no;

    std::string_view text = source.substr(ln.begin, ln.end - ln.begin);
    bool has_start = text.find(kEvolveStart) != std::string_view::npos;
    bool has_end = text.find(kEvolveEnd) != std::string_view::npos;
    if (!has_start && !has_end) continue;
    std::string where = "line " + std::to_string(line_no) + ": ";
    if (has_start && has_end)
      return invalid_argument(where + "[EVOLVE_START] and [EVOLVE_END] on the same line");
    if (!starts_with_comment(text))
      return invalid_argument(where + std::string(has_start ? kEvolveStart : kEvolveEnd) +
                              " must be in a comment on its own line");
    if (has_start) {
      if (open_line != 0)
        return invalid_argument(where + "nested [EVOLVE_START] (region opened on line " +
                                std::to_string(open_line) + " is not closed)");
      open_line = line_no;
      pending.begin = ln.next;
    } else {
      if (open_line == 0) return invalid_argument(where + "[EVOLVE_END] without a matching [EVOLVE_START]");
      pending.end = ln.begin;
      regions.push_back(pending);
      open_line = 0;
    }
  }
  if (open_line != 0)
    return invalid_argument("line " + std::to_string(open_line) + ": [EVOLVE_START] is never closed by [EVOLVE_END]");
  if (regions.empty()) return invalid_argument("no [EVOLVE_START] ... [EVOLVE_END] region");
  return regions;
}

Result<std::string> replace_region(std::string_view source, std::string_view content, size_t index) {
  if (content.find(kEvolveStart) != std::string_view::npos || content.find(kEvolveEnd) != std::string_view::npos)
    return invalid_argument("replacement text contains an [EVOLVE_START] or [EVOLVE_END] marker");
  KILN_ASSIGN_OR_RETURN(std::vector<Region> regions, find_regions(source));
  if (index >= regions.size())
    return invalid_argument("region " + std::to_string(index) + " does not exist (the source has " +
                            std::to_string(regions.size()) + ")");
  const Region& r = regions[index];
  std::string out;
  out.reserve(source.size() + content.size() + 1);
  out.append(source.substr(0, r.begin));
  out.append(content);
  // The end marker must stay on its own line.
  if (!content.empty() && content.back() != '\n') out.push_back('\n');
  out.append(source.substr(r.end));
  return out;
}

std::string region_text(std::string_view source, const Region& r) {
  if (r.begin > r.end || r.end > source.size()) return {};
  return std::string(source.substr(r.begin, r.end - r.begin));
}

}  // namespace kiln::task
