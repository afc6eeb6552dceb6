// Copies and noise (promotion.h check_not_a_copy): a kernel that differs from a registered one only in
// comments or whitespace is a duplicate, and a "new best" inside the registered best's interval is noise.
#include <cstdio>
#include <string>
#include <string_view>

#include "kiln/core/files.h"
#include "promotion.h"

namespace kiln::registry {

namespace {

bool is_word(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

// Copies the literal that starts at source[i] (quote `q`) to `out`; returns the index after it.
size_t copy_literal(std::string_view source, size_t i, std::string& out) {
  const char q = source[i];
  out.push_back(source[i++]);
  while (i < source.size()) {
    char c = source[i++];
    out.push_back(c);
    if (c == '\\' && i < source.size()) {
      out.push_back(source[i++]);
    } else if (c == q || c == '\n') {
      break;
    }
  }
  return i;
}

std::string fmt2(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

bool is_operator(char c) { return c != 0 && std::string_view("+-*/%&|^<>=!:.").find(c) != std::string_view::npos; }

// Whether a space must stay between `a` and `b` so that they stay two tokens.
bool must_separate(char a, char b) { return (is_word(a) && is_word(b)) || (is_operator(a) && is_operator(b)); }

}  // namespace

std::string normalized_source(std::string_view source) {
  std::string out;
  // A directive sits on lines of its own: a newline before it and where it ends.
  bool pending_space = false, pending_newline = false, in_directive = false, line_start = true;
  auto emit = [&](char c) {
    if (c == '#' && line_start) {
      pending_newline = true;
      in_directive = true;
    }
    if (pending_newline && !out.empty())
      out.push_back('\n');
    else if (pending_space && !out.empty() && must_separate(out.back(), c))
      out.push_back(' ');
    pending_space = pending_newline = line_start = false;
    out.push_back(c);
  };
  for (size_t i = 0; i < source.size();) {
    char c = source[i];
    if (c == '/' && i + 1 < source.size() && source[i + 1] == '/') {
      while (i < source.size() && source[i] != '\n') ++i;  // the newline itself is whitespace
    } else if (c == '/' && i + 1 < source.size() && source[i + 1] == '*') {
      size_t end = source.find("*/", i + 2);
      i = end == std::string_view::npos ? source.size() : end + 2;
      pending_space = true;  // a comment separates tokens like a space
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v' || c == '\n') {
      if (c == '\n' && !(i > 0 && source[i - 1] == '\\')) {
        line_start = true;
        if (in_directive) pending_newline = true;
        in_directive = false;
      }
      pending_space = true;
      ++i;
    } else if (c == '"' || c == '\'') {
      emit(c);
      out.pop_back();
      i = copy_literal(source, i, out);
    } else {
      emit(c);
      ++i;
    }
  }
  return out;
}

namespace detail {

Status check_not_a_copy(const std::vector<KernelEntry>& entries, const std::string& dir, const proto::PromoteRequest& r,
                        const std::string& language, const std::string& source,
                        const std::map<std::string, int64_t>& shape) {
  const std::string normal = normalized_source(source);
  const KernelEntry* best = nullptr;
  for (const KernelEntry& e : entries) {
    if (e.op != r.op || e.dtype != r.dtype || e.language != language || e.target_gpu != r.worker.device_name ||
        e.shape != shape)
      continue;
    auto stored = read_file(dir + "/" + e.source_path);
    if (stored.is_ok() && normalized_source(*stored) == normal)
      return Status(StatusCode::kAlreadyExists, "duplicate of " + e.kernel_id +
                                                    ": the same source up to comments and whitespace" +
                                                    (r.params.empty() ? "" : ", with the same parameters"));
    if (!e.verification.passed || !e.benchmark.passed) continue;
    if (best == nullptr || e.benchmark.speedup > best->benchmark.speedup) best = &e;
  }
  if (best == nullptr) return Status::ok();
  const bool has_interval = best->speedup_hi > 0;
  const double best_hi = has_interval ? best->speedup_hi : best->benchmark.speedup;
  if (r.confirmation.speedup_lo > best_hi) return Status::ok();
  return failed_precondition("not measurably faster than " + best->kernel_id + " (" + fmt2(best->benchmark.speedup) +
                             "x" + (has_interval ? " [" + fmt2(best->speedup_lo) + ", " + fmt2(best_hi) + "]" : "") +
                             "): the confirmation's interval lower bound " + fmt2(r.confirmation.speedup_lo) +
                             " is not above " + fmt2(best_hi));
}

}  // namespace detail

}  // namespace kiln::registry
