// Small string helpers.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace kiln {

// One number through a printf format ("%.2fx", "%.0f %%"): the text Kiln's logs, reports and summaries show.
inline std::string format_value(const char* printf_format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, printf_format, value);
  return buf;
}

// Every occurrence of `from` in `s` replaced by `to`, left to right (what is put in is not searched again).
inline void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
}

}  // namespace kiln
