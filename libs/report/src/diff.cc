#include <algorithm>
#include <cstdint>
#include <sstream>

#include "kiln/report/report.h"

namespace kiln::report {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

std::vector<std::string> line_diff(const std::string& before, const std::string& after) {
  const std::vector<std::string> a = lines_of(before), b = lines_of(after);
  std::vector<std::string> out;
  if (a.size() > kMaxDiffLines || b.size() > kMaxDiffLines) {
    for (const auto& l : a) out.push_back("- " + l);
    for (const auto& l : b) out.push_back("+ " + l);
    return out;
  }
  // lcs[i][j]: the longest common subsequence of a[i:] and b[j:].
  std::vector<std::vector<uint32_t>> lcs(a.size() + 1, std::vector<uint32_t>(b.size() + 1, 0));
  for (size_t i = a.size(); i-- > 0;)
    for (size_t j = b.size(); j-- > 0;)
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (i < a.size() && j < b.size() && a[i] == b[j]) {
      out.push_back("  " + a[i]);
      ++i;
      ++j;
    } else if (i < a.size() && (j == b.size() || lcs[i + 1][j] >= lcs[i][j + 1])) {
      out.push_back("- " + a[i++]);  // removals before additions, as a reader expects
    } else {
      out.push_back("+ " + b[j++]);
    }
  }
  return out;
}

}  // namespace kiln::report
