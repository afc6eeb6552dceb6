// Small string helpers.
#pragma once

#include <cstdio>
#include <string>

namespace kiln {

// One number through a printf format ("%.2fx", "%.0f %%"): the text Kiln's logs, reports and summaries show.
inline std::string format_value(const char* printf_format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, printf_format, value);
  return buf;
}

}  // namespace kiln
