// Editable regions: the [EVOLVE_START] / [EVOLVE_END] convention of KernelFoundry task packages.
#include "kiln/task/task.h"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <utility>

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
    if (has_start && has_end) return invalid_argument(where + "[EVOLVE_START] and [EVOLVE_END] on the same line");
    if (!starts_with_comment(text))
      return invalid_argument(where + std::string(has_start ? kEvolveStart : kEvolveEnd) +
                              " must be in a comment on its own line");
    if (has_start) {
      if (open_line != 0)
        return invalid_argument(where + "nested [EVOLVE_START] (region opened on line " + std::to_string(open_line) +
                                " is not closed)");
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
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> bodies, region_bodies(source));
  if (index >= bodies.size())
    return invalid_argument("region " + std::to_string(index) + " does not exist (the source has " +
                            std::to_string(bodies.size()) + ")");
  bodies[index] = std::string(content);
  return splice_regions(source, bodies);
}

std::string region_text(std::string_view source, const Region& r) {
  if (r.begin > r.end || r.end > source.size()) return {};
  return std::string(source.substr(r.begin, r.end - r.begin));
}

bool kernel_regions_empty(const proto::FileMap& files, const TaskSpec& spec) {
  const auto kernel = files.find(spec.kernel_file);
  if (kernel == files.end()) return false;
  auto bodies = region_bodies(kernel->second.data);
  if (!bodies.is_ok()) return false;
  for (const std::string& body : *bodies) {
    for (char ch : body)
      if (!std::isspace(static_cast<unsigned char>(ch))) return false;
  }
  return true;
}

Result<std::vector<std::string>> region_bodies(std::string_view source) {
  KILN_ASSIGN_OR_RETURN(std::vector<Region> regions, find_regions(source));
  std::vector<std::string> bodies;
  bodies.reserve(regions.size());
  for (const Region& r : regions) bodies.push_back(region_text(source, r));
  return bodies;
}

namespace {

constexpr std::string_view kOutside = "the proposal changed code outside the editable regions";
// What a reason quotes of a line: enough to recognize it, never a whole minified file.
constexpr size_t kMaxQuotedBytes = 80;

bool has_marker(std::string_view text) {
  return text.find(kEvolveStart) != std::string_view::npos || text.find(kEvolveEnd) != std::string_view::npos;
}

std::string count_of(size_t n, std::string_view one, std::string_view many) {
  return std::to_string(n) + " " + std::string(n == 1 ? one : many);
}

std::string editable_regions(size_t n) { return count_of(n, "editable region", "editable regions"); }

// The line of `text` that holds byte `at`, trimmed and quoted.
std::string quoted_line(std::string_view text, size_t at) {
  size_t begin = text.rfind('\n', at == 0 ? 0 : at - 1);
  begin = begin == std::string_view::npos || at == 0 ? 0 : begin + 1;
  size_t end = text.find('\n', at);
  std::string_view line = text.substr(begin, (end == std::string_view::npos ? text.size() : end) - begin);
  while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
  while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r')) line.remove_suffix(1);
  if (line.size() > kMaxQuotedBytes) return "\"" + std::string(line.substr(0, kMaxQuotedBytes)) + "...\"";
  return "\"" + std::string(line) + "\"";
}

std::string without_whitespace(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n' && c != '\v' && c != '\f') out.push_back(c);
  return out;
}

// The text outside the regions, as the pieces between them: before the first region (its start marker
// line included), between consecutive regions (markers included), after the last one.
std::vector<std::pair<size_t, size_t>> outside_pieces(std::string_view source, const std::vector<Region>& regions) {
  std::vector<std::pair<size_t, size_t>> pieces;
  size_t from = 0;
  for (const Region& r : regions) {
    pieces.emplace_back(from, r.begin);
    from = r.end;
  }
  pieces.emplace_back(from, source.size());
  return pieces;
}

}  // namespace

Result<std::string> splice_regions(std::string_view original, const std::vector<std::string>& bodies) {
  KILN_ASSIGN_OR_RETURN(std::vector<Region> regions, find_regions(original));
  if (bodies.size() != regions.size())
    return invalid_argument("the proposal has " + count_of(bodies.size(), "region body", "region bodies") +
                            " where the task's kernel has " + editable_regions(regions.size()));
  std::string out;
  size_t from = 0;
  for (size_t i = 0; i < regions.size(); ++i) {
    if (has_marker(bodies[i]))
      return invalid_argument("the new body of region " + std::to_string(i + 1) +
                              " contains an [EVOLVE_START] or [EVOLVE_END] marker");
    out.append(original.substr(from, regions[i].begin - from));
    out.append(bodies[i]);
    if (!bodies[i].empty() && bodies[i].back() != '\n') out.push_back('\n');
    from = regions[i].end;
  }
  out.append(original.substr(from));
  return out;
}

Status check_regions_only(std::string_view original, std::string_view candidate) {
  auto theirs = find_regions(original);
  if (!theirs.is_ok()) return theirs.status().with_context("the task's kernel");
  auto ours = find_regions(candidate);
  if (!ours.is_ok())
    return invalid_argument(std::string(kOutside) + ": its region markers are broken (" + ours.status().message() +
                            ")");
  if (ours->size() != theirs->size())
    return invalid_argument(std::string(kOutside) + ": it has " + editable_regions(ours->size()) +
                            " where the task's kernel has " + std::to_string(theirs->size()) +
                            " (a marker line was added or removed)");
  const auto task_pieces = outside_pieces(original, *theirs);
  const auto cand_pieces = outside_pieces(candidate, *ours);
  for (size_t k = 0; k < task_pieces.size(); ++k) {
    const auto [task_from, task_to] = task_pieces[k];
    const auto [cand_from, cand_to] = cand_pieces[k];
    std::string_view want = original.substr(task_from, task_to - task_from);
    std::string_view got = candidate.substr(cand_from, cand_to - cand_from);
    if (want == got) continue;
    size_t i = 0;
    while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
    const size_t at = cand_from + i, task_at = task_from + i;  // the first differing bytes
    const auto line = 1 + std::count(candidate.begin(), candidate.begin() + static_cast<std::ptrdiff_t>(at), '\n');
    std::string where;
    if (at == candidate.size())
      where = "the file ends where the task's kernel has " + quoted_line(original, task_at);
    else if (task_at == original.size())
      where = quoted_line(candidate, at) + " after the end of the task's kernel";
    else
      where = quoted_line(candidate, at) + " where the task's kernel has " + quoted_line(original, task_at);
    std::string reason = std::string(kOutside) + " (line " + std::to_string(line) + ": " + where + ")";
    if (without_whitespace(want) == without_whitespace(got))
      reason += "; only whitespace differs there, but outside the regions the file must match the task's byte for byte";
    return invalid_argument(reason);
  }
  return Status::ok();
}

Result<std::string> accept_proposal(std::string_view original, std::string_view code,
                                    const std::vector<std::string>& bodies) {
  if (!bodies.empty()) {
    if (!code.empty()) return invalid_argument("the proposal has both a whole file and region bodies");
    return splice_regions(original, bodies);
  }
  if (code.empty()) return invalid_argument("the proposal has no code");
  KILN_RETURN_IF_ERROR(check_regions_only(original, code));
  return std::string(code);
}

}  // namespace kiln::task
