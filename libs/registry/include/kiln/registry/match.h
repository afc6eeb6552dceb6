// The planner's match rule: which verified kernel serves an op, a dtype, a GPU and a shape.
//
// Header-only, on the standard library and nlohmann/json alone, so that a program embedding
// verified_kernels.json picks a kernel exactly as `kiln registry match` does (the CLI calls this
// header). Nothing here throws: failures come back as text in the result.
//
// The rule, in order:
//   1. Op equal; the entry's dtype one of dtypes_for(query dtype) (a quantization maps to dtypes:
//      fp8 -> fp8, then fp16; awq -> fp16; vocabulary.h has the table).
//   2. Only what `kiln registry verify` accepts: verification.passed and benchmark.passed true, the
//      source file present and matching source_sha256. An entry without source_sha256 (Forge's) only
//      with allow_unhashed, and the answer then says so. An entry with an unknown evidence level is
//      skipped with a warning (the registry stays readable).
//   3. GPU tier, best first (an entry's GPU names are its target_gpu and its benchmark.gpu_name):
//        exact         the query's slug equals the slug of one of them;
//        contains      Forge's rule made strict: one name is a run of whole tokens of the other that
//                      holds a model number ("H100" within "NVIDIA H100 80GB HBM3"), so a shorter model
//                      name never captures a longer one ("H20" is not within "H200", "A10" not "A100");
//        architecture  both are the same chip class in the table of gpu_kind() (H100, H200, H800, GH200
//                      are one class; the H20, a much smaller part of the same family, is its own);
//        any           no GPU asked for: every entry qualifies, at this lowest tier.
//      An entry that reaches none of these is out. CPU entries (language "cpp") match by exact name
//      only: Kiln builds them with -march=native, so another CPU model may lack their instructions.
//   4. Shape: every measured shape of the entry (each of its "cases", else its "shape") is tried and the
//      best one counts. Dimension names compare through canonical_dim() (Forge's batch/hidden_size are
//      Kiln's B/H). Every dim the entry names must be in the query, within max_shape_ratio (default 2)
//      of the query's value; a query dim the entry does not name is free (Forge's rule has no shape
//      term), but ranks below naming it. Best first: the exact shape, then fewer free dims, then the
//      smaller distance = sum over the named dims of |log(v_entry / v_query)|.
//   5. Among equals: the query's own dtype before a mapped one, higher evidence level, a hashed source
//      over an unhashed one, higher speedup (at the shape that fitted), newer created_at, then the smaller
//      kernel id (so the answer never depends on the file's order).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/registry/match_entry.h"
#include "kiln/registry/vocabulary.h"

namespace kiln::registry {

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

struct Match {
  size_t index = 0;  // into the candidates, or into the registry's "kernels" array
  GpuTier gpu_tier = GpuTier::kAnyGpu;
  double shape_distance = 0;             // 0 for the exact shape
  std::map<std::string, int64_t> shape;  // the measured shape that fitted
  double speedup = 0;                    // measured at that shape
  std::string reason;                    // "exact GPU (nvidiah200), exact shape"
};

struct MatchOutcome {
  std::optional<Match> match;
  std::string error;                  // without a match: why nothing fits (or which entry could not be read)
  std::vector<std::string> warnings;  // entries skipped for an unknown evidence level; an unhashed pick
};

namespace detail {

// Why `c` is not what `verify` would accept now; "" when it is (an unhashed source only when allowed).
inline std::string unverified_reason(const MatchCandidate& c, const MatchOptions& o) {
  if (!c.verification_passed) return "verification.passed is false";
  if (!c.benchmark_passed) return "benchmark.passed is false";
  switch (c.source) {
    case SourceCheck::kMatches: return "";
    case SourceCheck::kUnhashed: return o.allow_unhashed ? "" : "no source_sha256; --allow-unhashed accepts it";
    case SourceCheck::kMismatch: return "source " + c.source_path + " does not match source_sha256";
    case SourceCheck::kMissing: return "source " + c.source_path + " is missing";
    case SourceCheck::kUnchecked: return "source not checked";
  }
  return "?";
}

// How the GPU matched; nullopt when the entry's GPU does not qualify.
struct GpuFit {
  GpuTier tier;
  std::string why;
};

inline std::optional<GpuFit> gpu_fit(const MatchCandidate& c, const MatchQuery& q) {
  const std::string measured_on = c.gpu_name.empty() ? c.target_gpu : c.gpu_name;
  if (q.gpu.empty()) return GpuFit{GpuTier::kAnyGpu, "any GPU (none asked for): measured on " + measured_on};
  const std::string want = slug_chars(q.gpu);
  std::vector<const std::string*> names;
  for (const std::string* n : {&c.target_gpu, &c.gpu_name})
    if (!slug_chars(*n).empty()) names.push_back(n);
  for (const std::string* n : names)
    if (slug_chars(*n) == want) return GpuFit{GpuTier::kExact, "exact GPU (" + want + ")"};
  if (c.language == "cpp") return std::nullopt;  // CPU kernels: the same model only (see the top of this file)
  for (const std::string* n : names) {
    if (gpu_name_within(q.gpu, *n)) return GpuFit{GpuTier::kContains, "GPU name " + want + " within " + slug_chars(*n)};
    if (gpu_name_within(*n, q.gpu)) return GpuFit{GpuTier::kContains, "GPU name " + slug_chars(*n) + " within " + want};
  }
  GpuKind wanted = gpu_kind(q.gpu);
  GpuKind kind = gpu_kind(c.target_gpu);
  if (kind.chip.empty()) kind = gpu_kind(c.gpu_name);
  if (!wanted.chip.empty() && kind.chip == wanted.chip)
    return GpuFit{GpuTier::kSameArchitecture, "same architecture (" + kind.family + ", " + kind.chip + " class) as " +
                                                  q.gpu + ": measured on " + measured_on};
  return std::nullopt;
}

inline std::string architecture_label(const MatchCandidate& c) {
  if (c.language == "cpp") return "cpu";
  GpuKind kind = gpu_kind(c.target_gpu);
  if (kind.chip.empty()) kind = gpu_kind(c.gpu_name);
  return kind.chip.empty() ? "unknown architecture" : kind.family + ", " + kind.chip + " class";
}

inline bool nearly_equal(double a, double b) {
  double scale = std::fmax(1.0, std::fmax(std::fabs(a), std::fabs(b)));
  return std::fabs(a - b) <= 1e-9 * scale;
}

struct Scored {
  size_t index;
  GpuFit gpu;
  ShapeFit shape;
  MeasuredShape measured;  // the shape that fitted best, with its speedup
  size_t dtype_rank = 0;   // position in dtypes_for(query)
};

inline int shape_order(const ShapeFit& a, const ShapeFit& b) {
  if (a.exact != b.exact) return a.exact ? -1 : 1;
  if (a.unnamed != b.unnamed) return a.unnamed < b.unnamed ? -1 : 1;
  if (!nearly_equal(a.distance, b.distance)) return a.distance < b.distance ? -1 : 1;
  return 0;
}

// Negative when `a` ranks before `b`, positive after, 0 for a full tie; `why` names the deciding key
// when the two were equal on GPU tier and shape.
inline int compare(const std::vector<MatchCandidate>& cs, const Scored& a, const Scored& b, std::string* why) {
  if (a.gpu.tier != b.gpu.tier) return a.gpu.tier < b.gpu.tier ? -1 : 1;
  if (int s = shape_order(a.shape, b.shape); s != 0) return s;
  const MatchCandidate& x = cs[a.index];
  const MatchCandidate& y = cs[b.index];
  auto decide = [&](int sign, const char* key) {
    if (why) *why = key;
    return sign;
  };
  if (a.dtype_rank != b.dtype_rank) return decide(a.dtype_rank < b.dtype_rank ? -1 : 1, "the dtype asked for");
  int ex = evidence_rank(x.evidence_level), ey = evidence_rank(y.evidence_level);
  if (ex != ey) return decide(ex > ey ? -1 : 1, "higher evidence level");
  if (x.source_verified() != y.source_verified()) return decide(x.source_verified() ? -1 : 1, "a hashed source");
  if (a.measured.speedup != b.measured.speedup)
    return decide(a.measured.speedup > b.measured.speedup ? -1 : 1, "higher speedup");
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

// "fp16" or "fp8 or fp16"
inline std::string dtype_words(const std::vector<std::string>& dtypes) {
  std::string out;
  for (size_t i = 0; i < dtypes.size(); ++i) out += (i == 0 ? "" : " or ") + dtypes[i];
  return out;
}

// The best measured shape of `c` for the query (nullopt: none fits; `why` says why for the first).
inline std::optional<std::pair<ShapeFit, MeasuredShape>> best_shape(const MatchCandidate& c, const MatchQuery& q,
                                                                    double max_ratio, std::string* why) {
  std::optional<std::pair<ShapeFit, MeasuredShape>> best;
  for (const MeasuredShape& m : c.measured()) {
    std::string reason;
    std::optional<ShapeFit> fit = shape_fit(q.op, m.dims, q.shape, max_ratio, &reason);
    if (!fit) {
      if (why && why->empty()) *why = reason;
      continue;
    }
    if (!best || shape_order(*fit, best->first) < 0 ||
        (shape_order(*fit, best->first) == 0 && m.speedup > best->second.speedup))
      best = std::make_pair(*fit, m);
  }
  return best;
}

// The winner's reason line.
inline std::string reason_for(const MatchCandidate& c, const Scored& s, const MatchQuery& q) {
  std::string shape;
  if (s.shape.exact) {
    shape = "exact shape";
  } else {
    shape = (s.shape.distance == 0 ? "shape " : "nearest shape ") + format_shape(s.measured.dims) + " for " +
            format_shape(q.shape);
    if (s.shape.unnamed > 0) shape += " (dims it does not name are free: Forge's rule)";
  }
  std::string out = s.gpu.why + ", " + shape;
  if (c.dtype != q.dtype) out += ", dtype " + c.dtype + " for " + q.dtype;
  if (c.source == SourceCheck::kUnhashed) out += ", unhashed source (allowed)";
  return out;
}

}  // namespace detail

namespace detail {

// Steps 1 and 2 of the rule: the entries of the op in a dtype the query takes that `verify` accepts, each
// with its dtype's rank. Empty with `out.error` set when none is left; skipped entries warn in `out`.
inline std::vector<std::pair<size_t, size_t>> verified_candidates(const std::vector<MatchCandidate>& candidates,
                                                                  const MatchQuery& query, const MatchOptions& options,
                                                                  MatchOutcome& out) {
  const std::vector<std::string> dtypes = dtypes_for(query.dtype);
  // Each stage keeps what passed it, so that the error can say where the candidates ran out.
  std::set<std::string> ops, op_dtypes, unverified;
  std::vector<std::pair<size_t, size_t>> verified;  // (index, dtype rank)
  for (size_t i = 0; i < candidates.size(); ++i) {
    const MatchCandidate& c = candidates[i];
    ops.insert(c.op);
    if (c.op != query.op) continue;
    op_dtypes.insert(c.dtype);
    size_t rank = 0;
    while (rank < dtypes.size() && dtypes[rank] != c.dtype) ++rank;
    if (rank == dtypes.size()) continue;
    if (std::string e = evidence_level_error(c.evidence_level); !e.empty()) {
      out.warnings.push_back("skipped " + c.kernel_id + ": " + e);
    } else if (std::string why = unverified_reason(c, options); !why.empty()) {
      unverified.insert(c.kernel_id + " (" + why + ")");
    } else {
      verified.emplace_back(i, rank);
    }
  }
  const std::string what = query.op + " " + dtype_words(dtypes);
  if (candidates.empty()) {
    out.error = "no " + what + " kernel: the registry is empty";
  } else if (op_dtypes.empty()) {
    out.error = "no kernel for op " + query.op + " (the registry has: " + list_some(ops) + ")";
  } else if (verified.empty() && unverified.empty() && out.warnings.empty()) {
    const bool mapped = dtypes.size() > 1 || dtypes[0] != query.dtype;
    out.error = "no " + query.op + " kernel in dtype " + dtype_words(dtypes) + " (" +
                (mapped ? "for " + query.dtype + "; " : "") + "it has: " + list_some(op_dtypes) + ")";
  } else if (verified.empty()) {
    out.error = "no " + what + " kernel that `kiln registry verify` accepts: " +
                (unverified.empty() ? std::string("every one was skipped") : list_some(unverified, 3));
  }
  return verified;
}

// Steps 3 and 4: the verified entries whose GPU and shape fit. Empty with `out.error` set when none does.
inline std::vector<Scored> fitting_candidates(const std::vector<MatchCandidate>& candidates,
                                              const std::vector<std::pair<size_t, size_t>>& verified,
                                              const MatchQuery& query, const MatchOptions& options, MatchOutcome& out) {
  std::vector<Scored> fits;
  std::set<std::string> gpus;
  std::optional<Scored> closest;  // right GPU, shape out of reach: for the error
  std::string closest_why;
  for (auto [i, rank] : verified) {
    const MatchCandidate& c = candidates[i];
    gpus.insert(c.target_gpu + " (" + architecture_label(c) + ")");
    std::optional<GpuFit> gpu = gpu_fit(c, query);
    if (!gpu) continue;
    std::string why;
    auto shape = best_shape(c, query, options.max_shape_ratio, &why);
    Scored s{i, *gpu, shape ? shape->first : ShapeFit{}, shape ? shape->second : c.measured()[0], rank};
    if (shape) {
      fits.push_back(s);
    } else if (!closest || compare(candidates, s, *closest, nullptr) < 0) {
      closest = s;
      closest_why = why;
    }
  }
  if (!fits.empty()) return fits;
  const std::string what = query.op + " " + dtype_words(dtypes_for(query.dtype));
  if (closest) {
    out.error = "no " + what + " kernel that fits " + format_shape(query.shape) +
                (query.gpu.empty() ? "" : " for " + query.gpu) + " (closest: " + candidates[closest->index].kernel_id +
                ", shape " + format_shape(closest->measured.dims) + ": " + closest_why + ")";
  } else {
    GpuKind kind = gpu_kind(query.gpu);
    out.error = "no " + what + " kernel for GPU " + query.gpu + " (" +
                (kind.chip.empty() ? "unknown architecture" : kind.family + ", " + kind.chip + " class") +
                "): there are " + what + " kernels for " + list_some(gpus);
  }
  return fits;
}

}  // namespace detail

// Picks the best entry for `query` (the rule at the top of this file). The candidates' `source` must have
// been filled in (check_source()); one left kUnchecked is never recommended.
inline MatchOutcome match_kernel(const std::vector<MatchCandidate>& candidates, const MatchQuery& query,
                                 const MatchOptions& options = {}) {
  MatchOutcome out;
  if (!query.gpu.empty() && detail::slug_chars(query.gpu).empty()) {
    out.error = "GPU name \"" + query.gpu + "\" has no letters or digits";
    return out;
  }
  if (!(options.max_shape_ratio >= 1) || std::isinf(options.max_shape_ratio)) {
    out.error = "the shape ratio limit must be a number >= 1, got " + std::to_string(options.max_shape_ratio);
    return out;
  }
  auto verified = detail::verified_candidates(candidates, query, options, out);
  if (verified.empty()) return out;
  std::vector<detail::Scored> fits = detail::fitting_candidates(candidates, verified, query, options, out);
  if (fits.empty()) return out;

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
  Match m{b.index, b.gpu.tier, b.shape.distance, b.measured.dims, b.measured.speedup, detail::reason_for(c, b, query)};
  std::string why;
  if (runner_up != fits.size() && detail::compare(candidates, b, fits[runner_up], &why) < 0 && !why.empty())
    m.reason += "; ahead of " + candidates[fits[runner_up].index].kernel_id + " on " + why;
  if (c.source == SourceCheck::kUnhashed)
    out.warnings.push_back(c.kernel_id + " has no source_sha256: nothing ties " + c.source_path +
                           " to the kernel that was measured");
  out.match = std::move(m);
  return out;
}

// The same on a registry document, {"kernels": [...]} or the bare array, whose sources lie under
// `registry_dir` (the folder of verified_kernels.json): each entry's file is checked (check_source())
// before it can be recommended. Match::index is the position in that array. An entry the planner cannot
// read is an error naming it (`kiln registry verify` says the same), not skipped.
inline MatchOutcome match_kernel(const nlohmann::json& registry, const std::string& registry_dir,
                                 const MatchQuery& query, const MatchOptions& options = {}) {
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
    if (candidates[i].op == query.op) candidates[i].source = check_source(registry_dir, candidates[i]);
  }
  return match_kernel(candidates, query, options);
}

}  // namespace kiln::registry
