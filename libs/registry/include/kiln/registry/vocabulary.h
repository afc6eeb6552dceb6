// The vocabulary of the planner's match rule (match.h): Forge's evidence levels, GPU names (slugs, whole-
// token containment, architecture families and chip classes), dimension names (the alias table that maps
// Forge's names onto each task's own), quantizations to dtypes, and shapes ("B=16,H=4096"). Header-only,
// on the standard library alone, like match.h, which includes it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::registry {

// ------------------------------------------------------------------------------ evidence levels

// Forge's evidence levels, weakest first. Kiln measures an op in isolation against its reference and
// does not integrate kernels into a runtime or a serving stack, so it writes only op_level; it reads
// all three so that entries from a registry that does can share the file.
inline constexpr std::string_view kEvidenceOpLevel = "op_level";              // an isolated microbenchmark
inline constexpr std::string_view kEvidenceRuntimeLevel = "runtime_level";    // measured inside a runtime path
inline constexpr std::string_view kEvidenceEndpointLevel = "endpoint_level";  // end to end on a serving stack

// 0, 1, 2 for the levels above; -1 for anything else.
inline int evidence_rank(std::string_view level) {
  if (level == kEvidenceOpLevel) return 0;
  if (level == kEvidenceRuntimeLevel) return 1;
  if (level == kEvidenceEndpointLevel) return 2;
  return -1;
}

// Empty when `level` is known, else the reason it is refused.
inline std::string evidence_level_error(std::string_view level) {
  if (evidence_rank(level) >= 0) return {};
  return "unknown evidence level \"" + std::string(level) + "\" (expected " + std::string(kEvidenceOpLevel) + ", " +
         std::string(kEvidenceRuntimeLevel) + " or " + std::string(kEvidenceEndpointLevel) + ")";
}

// ------------------------------------------------------------------------------ GPU names

namespace detail {

inline char lower_ascii(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }
inline bool is_alnum_lower(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
inline bool is_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// Lowercase alphanumerics only; empty when the name has none.
inline std::string slug_chars(std::string_view name) {
  std::string out;
  for (char c : name) {
    char l = lower_ascii(c);
    if (is_alnum_lower(l)) out.push_back(l);
  }
  return out;
}

// Lowercase alphanumeric runs: "NVIDIA A100-SXM4-40GB" -> {nvidia, a100, sxm4, 40gb}.
inline std::vector<std::string> name_tokens(std::string_view name) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : name) {
    char l = lower_ascii(c);
    if (is_alnum_lower(l)) {
      cur.push_back(l);
    } else if (!cur.empty()) {
      out.push_back(cur);
      cur.clear();
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// GeForce generations by the first two digits of the model number (RTX 4070 -> 40).
inline std::string_view geforce_family(std::string_view series, std::string_view number) {
  if (number.size() != 4 || !is_digits(number)) return {};
  std::string_view gen = number.substr(0, 2);
  if (series == "rtx") {
    if (gen == "20") return "turing";
    if (gen == "30") return "ampere";
    if (gen == "40") return "ada";
    if (gen == "50") return "blackwell";
  } else if (series == "gtx" && gen == "16") {
    return "turing";
  }
  return {};
}

// The tokens of a GPU name: its alphanumeric runs, with a vendor or brand word glued to the front split
// off and a GeForce series split from its number ("nvidiah100" -> nvidia, h100; "geforcertx4090" ->
// geforce, rtx, 4090), so that a slug and the full name give the same tokens.
inline std::vector<std::string> gpu_tokens(std::string_view name) {
  static constexpr std::string_view kGlued[] = {"nvidia", "geforce", "tesla", "quadro", "rtx", "gtx"};
  std::vector<std::string> out;
  for (std::string t : name_tokens(name)) {
    for (bool split = true; split;) {
      split = false;
      for (std::string_view p : kGlued) {
        if (t.size() > p.size() && t.compare(0, p.size(), p) == 0 &&
            (p != "rtx" && p != "gtx" ? true : is_digits(std::string_view(t).substr(p.size())))) {
          out.emplace_back(p);
          t.erase(0, p.size());
          split = true;
        }
      }
    }
    out.push_back(t);
  }
  return out;
}

}  // namespace detail

// "NVIDIA H200" -> "nvidiah200": lowercase, everything outside [a-z0-9] removed ("unknown" if nothing
// is left). Kernel ids use it, and the planner compares GPU names by it.
inline std::string gpu_slug(std::string_view name) {
  std::string s = detail::slug_chars(name);
  return s.empty() ? "unknown" : s;
}

// What the planner knows of a GPU model: its architecture family and its chip class, the parts close
// enough in size (SMs, memory system) that a kernel tuned on one is a fair pick for another.
struct GpuKind {
  std::string family;  // "hopper"
  std::string chip;    // "gh100"; an H20, a much smaller GH100 part, is a class of its own ("h20")
};

// The kind of a GPU name, from a table in this function (the data-center parts and GeForce generations
// Kiln is likely to meet; a GeForce card is a class of its own, "rtx4090"); empty for a name the table
// does not know, which then matches only by name. Tokens, not substrings, are compared, so "A10" is not
// "A100" and "H20" is not "H200".
inline GpuKind gpu_kind(std::string_view name) {
  struct Part {
    std::string_view token;
    std::string_view family;
    std::string_view chip;
  };
  static constexpr Part kParts[] = {
      {"v100", "volta", "gv100"},
      {"t4", "turing", "tu104"},
      {"a100", "ampere", "ga100"},
      {"a800", "ampere", "ga100"},
      {"a30", "ampere", "a30"},
      {"a10", "ampere", "ga102"},
      {"a10g", "ampere", "ga102"},
      {"a40", "ampere", "ga102"},
      {"a5000", "ampere", "ga102"},
      {"a6000", "ampere", "ga102"},
      {"a4000", "ampere", "ga104"},
      {"a16", "ampere", "ga107"},
      {"a2", "ampere", "ga107"},
      {"l4", "ada", "ad104"},
      {"l20", "ada", "ad102"},
      {"l40", "ada", "ad102"},
      {"l40s", "ada", "ad102"},
      {"ada", "ada", "ad102"},  // RTX 6000 Ada
      {"h100", "hopper", "gh100"},
      {"h200", "hopper", "gh100"},
      {"h800", "hopper", "gh100"},
      {"gh200", "hopper", "gh100"},
      {"h20", "hopper", "h20"},
      {"b100", "blackwell", "gb100"},
      {"b200", "blackwell", "gb100"},
      {"gb200", "blackwell", "gb100"},
      {"b300", "blackwell", "gb110"},
      {"gb300", "blackwell", "gb110"},
      {"blackwell", "blackwell", "gb202"},
  };
  std::vector<std::string> tokens = detail::gpu_tokens(name);
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (const Part& p : kParts)
      if (tokens[i] == p.token) return GpuKind{std::string(p.family), std::string(p.chip)};
    for (std::string_view series : {std::string_view("rtx"), std::string_view("gtx")}) {
      if (tokens[i] == series && i + 1 < tokens.size()) {
        std::string_view fam = detail::geforce_family(series, tokens[i + 1]);
        if (!fam.empty()) return GpuKind{std::string(fam), std::string(series) + tokens[i + 1]};
      }
    }
  }
  return {};
}

// The architecture family of a GPU name ("" when the table of gpu_kind() does not know it).
inline std::string gpu_architecture(std::string_view name) { return gpu_kind(name).family; }

// Whether the slug of `part` is a run of whole tokens of `name` (gpu_tokens) that holds a model number (a
// token with a digit): "H100" lies within "NVIDIA H100 80GB HBM3" and "RTX 4070" within "NVIDIA GeForce
// RTX 4070 Laptop GPU", but "H20" does not lie within "NVIDIA H200", "A10" not within "A100", and
// "NVIDIA" alone within nothing.
inline bool gpu_name_within(std::string_view part, std::string_view name) {
  const std::string want = detail::slug_chars(part);
  std::vector<std::string> tokens = detail::gpu_tokens(name);
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string run;
    bool has_digit = false;
    for (size_t j = i; j < tokens.size() && run.size() < want.size(); ++j) {
      run += tokens[j];
      for (char c : tokens[j]) has_digit = has_digit || (c >= '0' && c <= '9');
      if (run == want && has_digit) return true;
    }
  }
  return false;
}

// ------------------------------------------------------------------------------ shapes

// Parses "B=16,H=4096" strictly: comma-separated K=V, K a name ([A-Za-z_][A-Za-z0-9_]*), V a positive
// decimal integer, each key once (compared lowercased), no spaces. False with `error` set otherwise.
inline bool parse_shape(std::string_view text, std::map<std::string, int64_t>& shape, std::string& error) {
  shape.clear();
  if (text.empty()) {
    error = "expected K=V[,K=V...], got an empty string";
    return false;
  }
  std::set<std::string> seen;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string_view item =
        text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    const std::string quoted = "\"" + std::string(item) + "\"";
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      error = quoted + ": expected K=V with V a positive integer";
      return false;
    }
    std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    bool key_ok = !key.empty() && !(key[0] >= '0' && key[0] <= '9');
    for (char c : key) key_ok = key_ok && (detail::is_alnum_lower(detail::lower_ascii(c)) || c == '_');
    if (!key_ok) {
      error = quoted + ": expected a dimension name ([A-Za-z_][A-Za-z0-9_]*) before '='";
      return false;
    }
    int64_t v = 0;
    bool value_ok = detail::is_digits(value);
    for (char c : value) {
      if (!value_ok) break;
      int d = c - '0';
      if (v > (std::numeric_limits<int64_t>::max() - d) / 10)
        value_ok = false;
      else
        v = v * 10 + d;
    }
    if (!value_ok || v <= 0) {
      error = quoted + ": expected a positive integer after '" + std::string(key) + "=', got \"" + std::string(value) +
              "\"";
      return false;
    }
    std::string lowered;
    for (char c : key) lowered.push_back(detail::lower_ascii(c));
    if (!seen.insert(lowered).second) {
      error = quoted + ": dimension " + std::string(key) + " given twice";
      return false;
    }
    shape[std::string(key)] = v;
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return true;
}

// "B=16,H=4096" (keys as given, in map order).
inline std::string format_shape(const std::map<std::string, int64_t>& shape) {
  std::string out;
  for (const auto& [k, v] : shape) out += (out.empty() ? "" : ",") + k + "=" + std::to_string(v);
  return out.empty() ? "(no dims)" : out;
}

namespace detail {

// "2" or "1.5" for a ratio in messages.
inline std::string fmt_ratio(double r) {
  std::string out = std::to_string(r);
  while (!out.empty() && out.back() == '0') out.pop_back();
  if (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

}  // namespace detail

// The name a dimension is compared by: Forge's names for the dims they share (batch, hidden_size,
// seq_len, heads), each Kiln task's own names for them, and any other key lowercased. The table, op by op
// where names differ:
//   any op    B -> batch, H -> hidden_size, S -> seq_len (rmsnorm: B=rows, H=hidden size)
//   softmax   rows -> batch, cols -> hidden_size (cuda_softmax's rows and columns)
// Op equality comes first, so a name that means something else in another op (N: elements in
// reduce_sum, columns in sgemm) is left as it is.
inline std::string canonical_dim(std::string_view op, std::string_view key) {
  struct Alias {
    std::string_view op;  // "" for every op
    std::string_view from;
    std::string_view to;
  };
  static constexpr Alias kAliases[] = {
      {"", "b", "batch"},           {"", "h", "hidden_size"},           {"", "s", "seq_len"},
      {"softmax", "rows", "batch"}, {"softmax", "cols", "hidden_size"},
  };
  std::string lowered;
  for (char c : key) lowered.push_back(detail::lower_ascii(c));
  for (const Alias& a : kAliases)
    if ((a.op.empty() || a.op == op) && a.from == lowered) return std::string(a.to);
  return lowered;
}

// ------------------------------------------------------------------------------ dtypes

// The kernel dtypes that serve a query's dtype or quantization, best first (Forge's planner maps a
// plan's quantization to its activation dtype): awq, gptq, int4 and w4a16 run fp16 activations; fp8 takes
// an fp8 kernel, else fp16; int8 and w8a8 an int8 kernel, else fp16. Any other name is a dtype and serves
// only itself.
inline std::vector<std::string> dtypes_for(std::string_view dtype_or_quantization) {
  struct Rule {
    std::string_view name;
    std::string_view first;
    std::string_view second;  // "" when none
  };
  static constexpr Rule kRules[] = {
      {"awq", "fp16", ""},    {"gptq", "fp16", ""},     {"int4", "fp16", ""},     {"w4a16", "fp16", ""},
      {"fp8", "fp8", "fp16"}, {"int8", "int8", "fp16"}, {"w8a8", "int8", "fp16"},
  };
  std::string lowered;
  for (char c : dtype_or_quantization) lowered.push_back(detail::lower_ascii(c));
  for (const Rule& r : kRules) {
    if (r.name != lowered) continue;
    std::vector<std::string> out{std::string(r.first)};
    if (!r.second.empty()) out.emplace_back(r.second);
    return out;
  }
  return {std::string(dtype_or_quantization)};
}

namespace detail {

struct ShapeFit {
  double distance = 0;  // sum of |log(v_entry / v_query)| over the dims the entry names
  bool exact = false;   // every dim of the query named by the entry, with the same value
  int unnamed = 0;      // dims of the query the entry does not name (Forge's rule: no shape term for them)
};

inline std::map<std::string, int64_t> canonical_shape(std::string_view op, const std::map<std::string, int64_t>& s) {
  std::map<std::string, int64_t> out;
  for (const auto& [k, v] : s) out[canonical_dim(op, k)] = v;
  return out;
}

// How one measured shape of an entry fits the query, within `max_ratio` on every dim; nullopt with
// `why` when it does not: the entry names a dim the query does not, a value is not positive, or a dim is
// more than max_ratio away.
inline std::optional<ShapeFit> shape_fit(std::string_view op, const std::map<std::string, int64_t>& entry,
                                         const std::map<std::string, int64_t>& query, double max_ratio,
                                         std::string* why = nullptr) {
  std::map<std::string, int64_t> e = canonical_shape(op, entry), q = canonical_shape(op, query);
  auto no = [&](const std::string& reason) -> std::optional<ShapeFit> {
    if (why) *why = reason;
    return std::nullopt;
  };
  if (e.size() != entry.size() || q.size() != query.size()) return no("a dimension is named twice");
  ShapeFit fit{0, true, 0};
  for (const auto& [k, v] : e) {
    auto it = q.find(k);
    if (it == q.end()) return no("it names " + k + ", which the query does not");
    if (v <= 0 || it->second <= 0) return no(k + " is not positive");
    if (v == it->second) continue;
    double ratio = static_cast<double>(std::max(v, it->second)) / static_cast<double>(std::min(v, it->second));
    if (ratio > max_ratio)
      return no(k + "=" + std::to_string(v) + " is more than " + fmt_ratio(max_ratio) + "x from " +
                std::to_string(it->second));
    fit.exact = false;
    fit.distance += std::log(ratio);
  }
  fit.unnamed = static_cast<int>(q.size() - e.size());
  if (fit.unnamed > 0) fit.exact = false;
  return fit;
}

}  // namespace detail

}  // namespace kiln::registry
