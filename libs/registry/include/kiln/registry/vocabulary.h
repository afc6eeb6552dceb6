// The vocabulary of the planner's match rule (match.h): Forge's evidence levels, GPU names (slugs and
// architecture families) and shapes ("B=16,H=4096"). Header-only, on the standard library alone, like
// match.h, which includes it.
#pragma once

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

}  // namespace detail

// "NVIDIA H200" -> "nvidiah200": lowercase, everything outside [a-z0-9] removed ("unknown" if nothing
// is left). Kernel ids use it, and the planner compares GPU names by it.
inline std::string gpu_slug(std::string_view name) {
  std::string s = detail::slug_chars(name);
  return s.empty() ? "unknown" : s;
}

// The architecture family of a GPU name, from a table in this function (the data-center parts and
// GeForce generations Kiln is likely to meet); "" for a name the table does not know, which then
// matches only by name. Tokens, not substrings, are compared, so "A10" is not "A100".
inline std::string gpu_architecture(std::string_view name) {
  struct Family {
    std::string_view token;
    std::string_view family;
  };
  static constexpr Family kFamilies[] = {
      {"v100", "volta"},
      {"t4", "turing"},
      {"a100", "ampere"},
      {"a800", "ampere"},
      {"a10", "ampere"},
      {"a10g", "ampere"},
      {"a16", "ampere"},
      {"a2", "ampere"},
      {"a30", "ampere"},
      {"a40", "ampere"},
      {"a4000", "ampere"},
      {"a5000", "ampere"},
      {"a6000", "ampere"},
      {"l4", "ada"},
      {"l20", "ada"},
      {"l40", "ada"},
      {"l40s", "ada"},
      {"ada", "ada"},  // "RTX 6000 Ada"
      {"h100", "hopper"},
      {"h200", "hopper"},
      {"h800", "hopper"},
      {"h20", "hopper"},
      {"gh200", "hopper"},
      {"b100", "blackwell"},
      {"b200", "blackwell"},
      {"b300", "blackwell"},
      {"gb200", "blackwell"},
      {"gb300", "blackwell"},
      {"blackwell", "blackwell"},
  };
  // Vendor and brand words glued to the model in a slug ("nvidiah100", "geforcertx4090").
  static constexpr std::string_view kBrandPrefixes[] = {"nvidia", "geforce", "tesla", "quadro"};

  std::vector<std::string> tokens = detail::name_tokens(name);
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string_view t = tokens[i];
    for (bool stripped = true; stripped;) {
      stripped = false;
      for (std::string_view p : kBrandPrefixes) {
        if (t.size() > p.size() && t.substr(0, p.size()) == p) {
          t.remove_prefix(p.size());
          stripped = true;
        }
      }
    }
    for (const Family& f : kFamilies)
      if (t == f.token) return std::string(f.family);
    for (std::string_view series : {std::string_view("rtx"), std::string_view("gtx")}) {
      if (t == series && i + 1 < tokens.size()) {
        std::string_view fam = detail::geforce_family(series, tokens[i + 1]);
        if (!fam.empty()) return std::string(fam);
      }
      if (t.size() > series.size() && t.substr(0, series.size()) == series) {  // "rtx4090"
        std::string_view fam = detail::geforce_family(series, t.substr(series.size()));
        if (!fam.empty()) return std::string(fam);
      }
    }
  }
  return {};
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

struct ShapeFit {
  double distance = 0;
  bool exact = false;  // every value equal (a distance can round to 0 for huge, nearly equal values)
};

inline std::map<std::string, int64_t> lowered_keys(const std::map<std::string, int64_t>& s) {
  std::map<std::string, int64_t> out;
  for (const auto& [k, v] : s) {
    std::string l;
    for (char c : k) l.push_back(lower_ascii(c));
    out[l] = v;
  }
  return out;
}

inline std::optional<ShapeFit> shape_fit(const std::map<std::string, int64_t>& entry,
                                         const std::map<std::string, int64_t>& query) {
  std::map<std::string, int64_t> e = lowered_keys(entry), q = lowered_keys(query);
  if (e.size() != q.size() || e.size() != entry.size() || q.size() != query.size()) return std::nullopt;
  ShapeFit fit{0, true};
  for (auto ei = e.begin(), qi = q.begin(); ei != e.end(); ++ei, ++qi) {
    if (ei->first != qi->first) return std::nullopt;
    if (ei->second == qi->second) continue;
    if (ei->second <= 0 || qi->second <= 0) return std::nullopt;
    fit.exact = false;
    fit.distance += std::fabs(std::log(static_cast<double>(ei->second) / static_cast<double>(qi->second)));
  }
  return fit;
}

}  // namespace detail

// sum over the dims of |log(v_entry / v_query)|; nullopt when the key sets differ (compared lowercased)
// or a non-positive value differs (no ratio to take).
inline std::optional<double> shape_distance(const std::map<std::string, int64_t>& entry,
                                            const std::map<std::string, int64_t>& query) {
  std::optional<detail::ShapeFit> fit = detail::shape_fit(entry, query);
  if (!fit) return std::nullopt;
  return fit->distance;
}

}  // namespace kiln::registry
