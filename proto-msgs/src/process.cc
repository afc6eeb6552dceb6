// combined_output, stream_budgets and merge of ProcessResult, after the seeds' ProcessResult.
#include "kiln/proto/process.h"

namespace kiln::proto {

namespace {

void append_line_text(std::string& out, const std::string& text) {
  if (text.empty()) return;
  out += text;
  if (out.back() != '\n') out.push_back('\n');
}

}  // namespace

std::string combined_output(const ProcessResult& result, bool include_message) {
  std::string out;
  if (include_message) append_line_text(out, result.message);
  append_line_text(out, result.stdout_text);
  append_line_text(out, result.stderr_text);
  return out;
}

std::pair<size_t, size_t> stream_budgets(size_t stdout_bytes, size_t stderr_bytes, size_t max_bytes) {
  const size_t half = max_bytes / 2;
  if (stdout_bytes + stderr_bytes <= max_bytes) return {stdout_bytes, stderr_bytes};
  if (stdout_bytes <= half) return {stdout_bytes, max_bytes - stdout_bytes};
  if (stderr_bytes <= half) return {max_bytes - stderr_bytes, stderr_bytes};
  return {half, max_bytes - half};
}

ProcessResult merge(const std::map<std::string, ProcessResult>& results) {
  ProcessResult out;
  for (const auto& [name, r] : results) {
    if (out.returncode == 0) out.returncode = r.returncode;
    const std::string header = "=== " + name + " ===\n";
    if (!r.stdout_text.empty()) append_line_text(out.stdout_text, header + r.stdout_text);
    if (!r.stderr_text.empty()) append_line_text(out.stderr_text, header + r.stderr_text);
    if (!r.message.empty()) {
      if (!out.message.empty()) out.message.push_back('\n');
      out.message += name + ": " + r.message;
    }
  }
  return out;
}

}  // namespace kiln::proto
