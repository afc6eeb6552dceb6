#include "kiln/compiler/build_log.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>

namespace kiln::compiler {

namespace {

std::optional<int64_t> parse_int(std::string_view digits) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return v;
}

// The number written right before `suffix` in `line` ("1024 bytes smem" -> 1024).
std::optional<int64_t> number_before(std::string_view line, std::string_view suffix) {
  size_t at = line.find(suffix);
  if (at == std::string_view::npos) return std::nullopt;
  size_t end = at;
  while (end > 0 && line[end - 1] == ' ') --end;
  size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(line[begin - 1]))) --begin;
  return parse_int(line.substr(begin, end - begin));
}

// The number right after `prefix` in `line` ("Used 32 registers" -> 32).
std::optional<int64_t> number_after(std::string_view line, std::string_view prefix) {
  size_t at = line.find(prefix);
  if (at == std::string_view::npos) return std::nullopt;
  size_t begin = at + prefix.size();
  size_t end = begin;
  while (end < line.size() && std::isdigit(static_cast<unsigned char>(line[end]))) ++end;
  return parse_int(line.substr(begin, end - begin));
}

void keep_max(int64_t& target, std::optional<int64_t> v) {
  if (v && *v > target) target = *v;
}

}  // namespace

PtxasUsage parse_ptxas_usage(std::string_view log) {
  PtxasUsage u;
  bool any_function = false;
  size_t pos = 0;
  while (pos < log.size()) {
    size_t eol = log.find('\n', pos);
    std::string_view line = log.substr(pos, eol == std::string_view::npos ? std::string_view::npos : eol - pos);
    pos = eol == std::string_view::npos ? log.size() : eol + 1;

    if (auto regs = number_after(line, "Used "); regs && line.find(" registers") != std::string_view::npos) {
      any_function = true;
      keep_max(u.registers, regs);
      keep_max(u.shared_bytes, number_before(line, " bytes smem"));
    }
    if (line.find("bytes stack frame") != std::string_view::npos) {
      any_function = true;
      keep_max(u.stack_bytes, number_before(line, " bytes stack frame"));
      auto stores = number_before(line, " bytes spill stores");
      auto loads = number_before(line, " bytes spill loads");
      if (stores || loads) keep_max(u.spill_bytes, stores.value_or(0) + loads.value_or(0));
    }
  }
  // ptxas leaves out what a kernel does not use: once it has described a kernel, absent means zero.
  if (any_function) {
    for (int64_t* v : {&u.registers, &u.shared_bytes, &u.spill_bytes, &u.stack_bytes}) *v = std::max<int64_t>(*v, 0);
  }
  return u;
}

std::string trim_log(std::string_view log, size_t max_bytes) {
  // Lines of context kept before the first error ("In function ...", "In file included from ...").
  constexpr int kContextLines = 2;
  std::string_view kept = log;
  size_t skipped = 0;
  if (log.size() > max_bytes) {
    size_t err = log.find("error");
    if (err != std::string_view::npos) {
      size_t start = log.rfind('\n', err);
      start = start == std::string_view::npos ? 0 : start;
      for (int i = 0; i < kContextLines && start > 0; ++i) {
        size_t prev = log.rfind('\n', start - 1);
        start = prev == std::string_view::npos ? 0 : prev;
      }
      if (start > 0) ++start;  // past the newline
      skipped = start;
      kept = log.substr(start);
    }
  }
  std::string out;
  if (skipped > 0) out = "[... " + std::to_string(skipped) + " bytes before the first error dropped]\n";
  if (kept.size() + out.size() <= max_bytes) return out + std::string(kept);
  size_t budget = max_bytes > out.size() ? max_bytes - out.size() : 0;
  size_t cut = kept.rfind('\n', budget);
  if (cut == std::string_view::npos || cut == 0) cut = budget;
  out += kept.substr(0, cut);
  out += "\n[... " + std::to_string(kept.size() - cut) + " bytes dropped]";
  return out;
}

}  // namespace kiln::compiler
