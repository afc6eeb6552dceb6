// The planner's match rule: which verified kernel serves an op, a dtype, a GPU and a shape.
//
// Header-only, on the standard library and nlohmann/json alone, so that a program embedding
// verified_kernels.json picks a kernel exactly as `kiln registry match` does (the CLI calls this
// header). Nothing here throws: failures come back as text in the result.
//
// The rule, in order:
//   1. op and dtype must be equal.
//   2. GPU tier, best first (an entry's GPU names are its target_gpu and its benchmark.gpu_name):
//        exact         the query's slug equals the slug of one of them;
//        contains      Forge's planner rule: the query's slug contains, or is contained in, one of them
//                      ("h100" and "NVIDIA H100 80GB HBM3"). It is loose by design: "a10" also lies
//                      within "a100", which is why it ranks below an exact name;
//        architecture  both names map to the same family in the table of gpu_architecture();
//        any           no GPU asked for: every entry qualifies, at this lowest tier.
//      An entry that reaches none of these is out. CPU entries (language "cpp") match by exact name
//      only: Kiln builds them with -march=native, so another CPU model may lack their instructions.
//   3. Shape: the same dimension keys (compared lowercased), the exact shape first, else the nearest:
//      distance = sum over the dims of |log(v_entry / v_query)|, so 2048 and 8192 are equally far from
//      4096 and a factor counts the same at any size.
//   4. Among equals: higher evidence level, then a source with a sha256 over one without, then higher
//      speedup, then newer created_at, then the smaller kernel id (so the answer never depends on the
//      file's order).
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

#include <nlohmann/json.hpp>

#include "kiln/registry/vocabulary.h"

namespace kiln::registry {

// ------------------------------------------------------------------------------ matching

enum class GpuTier { kExact = 0, kContains = 1, kSameArchitecture = 2, kAnyGpu = 3 };

inline const char* gpu_tier_name(GpuTier t) {
  switch (t) {
    case GpuTier::kExact: return "exact";
    case GpuTier::kContains: return "contains";
    case GpuTier::kSameArchitecture: return "architecture";
    case GpuTier::kAnyGpu: return "any";
  }
  return "?";
}

struct MatchQuery {
  std::string op;
  std::string dtype;
  std::string gpu;  // empty: any GPU qualifies, at the lowest tier
  std::map<std::string, int64_t> shape;
};

// What the planner reads of one registry entry.
struct MatchCandidate {
  std::string kernel_id;
  std::string op;
  std::string dtype;
  std::string language;
  std::string source_path;
  std::string target_gpu;
  std::string gpu_name;  // benchmark.gpu_name
  std::map<std::string, int64_t> shape;
  double speedup = 0;  // benchmark.speedup
  std::string evidence_level = std::string(kEvidenceOpLevel);
  std::string created_at;
  // Whether the entry carries source_sha256. Forge's entries do not: nothing then ties the file at
  // source_path to the kernel that was measured, so they rank below hashed ones among equals.
  bool source_verified = false;
};

// Reads one registry entry. False with `error` naming the key when a field the planner needs is missing
// or has the wrong type, or the evidence level is unknown.
inline bool read_candidate(const nlohmann::json& entry, MatchCandidate& out, std::string& error) {
  out = MatchCandidate{};
  if (!entry.is_object()) {
    error = "expected an object";
    return false;
  }
  auto string_at = [&](const nlohmann::json& obj, const char* key, const std::string& path, bool required,
                       std::string& dst) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
      if (required) error = path + ": missing (required)";
      return !required;
    }
    if (!it->is_string()) {
      error = path + ": expected a string";
      return false;
    }
    dst = it->get_ref<const std::string&>();
    return true;
  };
  if (!string_at(entry, "kernel_id", "kernel_id", true, out.kernel_id) || !string_at(entry, "op", "op", true, out.op) ||
      !string_at(entry, "dtype", "dtype", true, out.dtype) ||
      !string_at(entry, "target_gpu", "target_gpu", true, out.target_gpu) ||
      !string_at(entry, "language", "language", false, out.language) ||
      !string_at(entry, "source_path", "source_path", false, out.source_path) ||
      !string_at(entry, "evidence_level", "evidence_level", true, out.evidence_level) ||
      !string_at(entry, "created_at", "created_at", false, out.created_at))
    return false;
  if (std::string e = evidence_level_error(out.evidence_level); !e.empty()) {
    error = "evidence_level: " + e;
    return false;
  }
  auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_object()) {
    error = shape == entry.end() ? "shape: missing (required)" : "shape: expected an object";
    return false;
  }
  for (const auto& [k, v] : shape->items()) {
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
      error = "shape." + k + ": expected an integer";
      return false;
    }
    out.shape[k] = v.get<int64_t>();
  }
  auto bench = entry.find("benchmark");
  if (bench == entry.end() || !bench->is_object()) {
    error = bench == entry.end() ? "benchmark: missing (required)" : "benchmark: expected an object";
    return false;
  }
  auto speedup = bench->find("speedup");
  if (speedup == bench->end() || !speedup->is_number()) {
    error = speedup == bench->end() ? "benchmark.speedup: missing (required)" : "benchmark.speedup: expected a number";
    return false;
  }
  out.speedup = speedup->get<double>();
  if (!string_at(*bench, "gpu_name", "benchmark.gpu_name", false, out.gpu_name)) return false;
  std::string sha;
  if (!string_at(entry, "source_sha256", "source_sha256", false, sha)) return false;
  out.source_verified = !sha.empty();
  return true;
}

struct Match {
  size_t index = 0;  // into the candidates, or into the registry's "kernels" array
  GpuTier gpu_tier = GpuTier::kAnyGpu;
  double shape_distance = 0;  // 0 for the exact shape
  std::string reason;         // "exact GPU (nvidiah200), exact shape"
};

struct MatchOutcome {
  std::optional<Match> match;
  std::string error;  // without a match: why nothing fits (or which entry could not be read), one line
};

namespace detail {

// The part of the reason that says how the GPU matched; nullopt when the entry's GPU does not qualify.
struct GpuFit {
  GpuTier tier;
  std::string why;
};

inline std::optional<GpuFit> gpu_fit(const MatchCandidate& c, const MatchQuery& q) {
  const std::string measured_on = c.gpu_name.empty() ? c.target_gpu : c.gpu_name;
  if (q.gpu.empty()) return GpuFit{GpuTier::kAnyGpu, "any GPU (none asked for): measured on " + measured_on};
  const std::string want = slug_chars(q.gpu);
  std::vector<std::string> names;
  for (const std::string* n : {&c.target_gpu, &c.gpu_name}) {
    std::string s = slug_chars(*n);
    if (!s.empty()) names.push_back(s);
  }
  for (const std::string& n : names)
    if (n == want) return GpuFit{GpuTier::kExact, "exact GPU (" + n + ")"};
  if (c.language == "cpp") return std::nullopt;  // CPU kernels: the same model only (see the top of this file)
  for (const std::string& n : names) {
    if (n.find(want) != std::string::npos) return GpuFit{GpuTier::kContains, "GPU name " + want + " within " + n};
    if (want.find(n) != std::string::npos) return GpuFit{GpuTier::kContains, "GPU name " + n + " within " + want};
  }
  std::string want_arch = gpu_architecture(q.gpu);
  std::string arch = gpu_architecture(c.target_gpu);
  if (arch.empty()) arch = gpu_architecture(c.gpu_name);
  if (!want_arch.empty() && arch == want_arch)
    return GpuFit{GpuTier::kSameArchitecture,
                  "same architecture (" + arch + ") as " + q.gpu + ": measured on " + measured_on};
  return std::nullopt;
}

inline std::string architecture_label(const MatchCandidate& c) {
  if (c.language == "cpp") return "cpu";
  std::string arch = gpu_architecture(c.target_gpu);
  if (arch.empty()) arch = gpu_architecture(c.gpu_name);
  return arch.empty() ? "unknown architecture" : arch;
}

inline bool nearly_equal(double a, double b) {
  double scale = std::fmax(1.0, std::fmax(std::fabs(a), std::fabs(b)));
  return std::fabs(a - b) <= 1e-9 * scale;
}

struct Scored {
  size_t index;
  GpuFit gpu;
  ShapeFit shape;
};

// Negative when `a` ranks before `b`, positive after, 0 for a full tie; `why` names the deciding key
// when the two were equal on GPU tier and shape.
inline int compare(const std::vector<MatchCandidate>& cs, const Scored& a, const Scored& b, std::string* why) {
  if (a.gpu.tier != b.gpu.tier) return a.gpu.tier < b.gpu.tier ? -1 : 1;
  if (a.shape.exact != b.shape.exact) return a.shape.exact ? -1 : 1;
  if (!nearly_equal(a.shape.distance, b.shape.distance)) return a.shape.distance < b.shape.distance ? -1 : 1;
  const MatchCandidate& x = cs[a.index];
  const MatchCandidate& y = cs[b.index];
  auto decide = [&](int sign, const char* key) {
    if (why) *why = key;
    return sign;
  };
  int ex = evidence_rank(x.evidence_level), ey = evidence_rank(y.evidence_level);
  if (ex != ey) return decide(ex > ey ? -1 : 1, "higher evidence level");
  if (x.source_verified != y.source_verified) return decide(x.source_verified ? -1 : 1, "a hashed source");
  if (x.speedup != y.speedup) return decide(x.speedup > y.speedup ? -1 : 1, "higher speedup");
  if (x.created_at != y.created_at) return decide(x.created_at > y.created_at ? -1 : 1, "a newer created_at");
  if (x.kernel_id != y.kernel_id) return decide(x.kernel_id < y.kernel_id ? -1 : 1, "kernel id order");
  return 0;
}

// "a, b, c and 2 more"
inline std::string list_some(const std::set<std::string>& items, size_t max_shown = 5) {
  std::string out;
  size_t i = 0;
  for (const std::string& s : items) {
    if (i == max_shown) return out + " and " + std::to_string(items.size() - max_shown) + " more";
    out += (i++ ? ", " : "") + s;
  }
  return out;
}

}  // namespace detail

// Picks the best entry for `query` (the rule at the top of this file).
inline MatchOutcome match_kernel(const std::vector<MatchCandidate>& candidates, const MatchQuery& query) {
  MatchOutcome out;
  if (!query.gpu.empty() && detail::slug_chars(query.gpu).empty()) {
    out.error = "GPU name \"" + query.gpu + "\" has no letters or digits";
    return out;
  }
  // Each stage keeps what passed it, so that the error can say where the candidates ran out.
  std::set<std::string> ops, dtypes, gpus;
  std::vector<size_t> same_op_dtype;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const MatchCandidate& c = candidates[i];
    ops.insert(c.op);
    if (c.op != query.op) continue;
    dtypes.insert(c.dtype);
    if (c.dtype == query.dtype) same_op_dtype.push_back(i);
  }
  const std::string what = query.op + " " + query.dtype;
  if (candidates.empty()) {
    out.error = "no " + what + " kernel: the registry is empty";
    return out;
  }
  if (dtypes.empty()) {
    out.error = "no kernel for op " + query.op + " (the registry has: " + detail::list_some(ops) + ")";
    return out;
  }
  if (same_op_dtype.empty()) {
    out.error = "no " + query.op + " kernel in dtype " + query.dtype + " (it has: " + detail::list_some(dtypes) + ")";
    return out;
  }

  std::vector<detail::Scored> fits;
  std::optional<detail::Scored> closest_gpu_only;  // right GPU, other dims: for the error
  for (size_t i : same_op_dtype) {
    const MatchCandidate& c = candidates[i];
    gpus.insert(c.target_gpu + " (" + detail::architecture_label(c) + ")");
    std::optional<detail::GpuFit> gpu = detail::gpu_fit(c, query);
    if (!gpu) continue;
    std::optional<detail::ShapeFit> shape = detail::shape_fit(c.shape, query.shape);
    detail::Scored s{i, *gpu, shape.value_or(detail::ShapeFit{})};
    if (!shape) {
      // Keep the one with the best GPU tier and evidence as "closest" for the error.
      if (!closest_gpu_only || detail::compare(candidates, s, *closest_gpu_only, nullptr) < 0) closest_gpu_only = s;
      continue;
    }
    fits.push_back(s);
  }
  if (fits.empty()) {
    if (closest_gpu_only) {
      const MatchCandidate& c = candidates[closest_gpu_only->index];
      out.error = "no " + what + " kernel with the dims of " + format_shape(query.shape) +
                  (query.gpu.empty() ? "" : " for " + query.gpu) + " (closest: " + c.kernel_id + ", shape " +
                  format_shape(c.shape) + ")";
    } else {
      std::string arch = gpu_architecture(query.gpu);
      out.error = "no " + what + " kernel for GPU " + query.gpu + " (" +
                  (arch.empty() ? "unknown architecture" : arch) + "): there are " + what + " kernels for " +
                  detail::list_some(gpus);
    }
    return out;
  }

  size_t best = 0, runner_up = fits.size();
  for (size_t k = 1; k < fits.size(); ++k) {
    if (detail::compare(candidates, fits[k], fits[best], nullptr) < 0) {
      runner_up = best;
      best = k;
    } else if (runner_up == fits.size() || detail::compare(candidates, fits[k], fits[runner_up], nullptr) < 0) {
      runner_up = k;
    }
  }
  const detail::Scored& b = fits[best];
  const MatchCandidate& c = candidates[b.index];
  Match m;
  m.index = b.index;
  m.gpu_tier = b.gpu.tier;
  m.shape_distance = b.shape.distance;
  m.reason = b.gpu.why + ", " +
             (b.shape.exact ? std::string("exact shape")
                            : "nearest shape " + format_shape(c.shape) + " for " + format_shape(query.shape));
  if (runner_up != fits.size()) {
    std::string why;
    if (detail::compare(candidates, b, fits[runner_up], &why) < 0 && !why.empty())
      m.reason += "; ahead of " + candidates[fits[runner_up].index].kernel_id + " on " + why;
  }
  out.match = std::move(m);
  return out;
}

// The same on a registry document: {"kernels": [...]} or the bare array. Match::index is then the
// position in that array. An entry the planner cannot read is an error naming it, not skipped.
inline MatchOutcome match_kernel(const nlohmann::json& registry, const MatchQuery& query) {
  MatchOutcome out;
  const nlohmann::json* kernels = &registry;
  if (registry.is_object()) {
    auto it = registry.find("kernels");
    kernels = it == registry.end() ? nullptr : &*it;
  }
  if (kernels == nullptr || !kernels->is_array()) {
    out.error = "expected {\"kernels\": [...]}";
    return out;
  }
  std::vector<MatchCandidate> candidates(kernels->size());
  for (size_t i = 0; i < kernels->size(); ++i) {
    std::string error;
    if (!read_candidate((*kernels)[i], candidates[i], error)) {
      out.error = "kernels[" + std::to_string(i) + "]." + error;
      return out;
    }
  }
  return match_kernel(candidates, query);
}

}  // namespace kiln::registry
