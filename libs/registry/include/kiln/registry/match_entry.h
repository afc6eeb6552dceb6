// What the planner (match.h) reads of a registry entry, and the check of its source file against its
// source_sha256: the same checks as `kiln registry verify`, header-only (standard library and
// nlohmann/json) like match.h, which includes this file.
#pragma once

#include <cstdint>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/registry/sha256.h"
#include "kiln/registry/vocabulary.h"

namespace kiln::registry {

struct MatchQuery {
  std::string op;
  std::string dtype;  // a dtype, or a quantization that dtypes_for() maps to dtypes (fp8 -> fp8, fp16)
  std::string gpu;    // empty: any GPU qualifies, at the lowest tier
  std::map<std::string, int64_t> shape;
};

struct MatchOptions {
  // No dim of a recommended kernel's measured shape is more than this factor from the query's (>= 1).
  double max_shape_ratio = 2.0;
  // Recommend an entry without source_sha256 (Forge's), saying so; without it such entries are skipped,
  // since nothing ties their file to the kernel that was measured.
  bool allow_unhashed = false;
};

// What became of an entry's source file.
enum class SourceCheck {
  kUnchecked,  // not looked at yet (check_source() fills it in)
  kMatches,    // present, and its sha256 is the entry's source_sha256
  kUnhashed,   // present, but the entry has no source_sha256 (Forge's entries)
  kMismatch,   // present, but edited since it was promoted
  kMissing,    // absent, unreadable, or a source_path outside the registry
};

// One shape the entry was measured at, with the speedup measured there.
struct MeasuredShape {
  std::map<std::string, int64_t> dims;
  double speedup = 0;
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
  double speedup = 0;  // benchmark.speedup, measured at `shape`
  // Every benchmark case ("cases", Kiln's entries); empty when the entry lists none (then `shape` alone).
  std::vector<MeasuredShape> cases;
  std::string evidence_level = std::string(kEvidenceOpLevel);  // an unknown level is skipped with a warning
  std::string created_at;
  bool verification_passed = false;
  bool benchmark_passed = false;
  std::string source_sha256;
  SourceCheck source = SourceCheck::kUnchecked;
  // The file is there and is the kernel that was measured.
  bool source_verified() const { return source == SourceCheck::kMatches; }
  // The shapes to fit against a query: every case, else the entry's shape.
  std::vector<MeasuredShape> measured() const {
    return cases.empty() ? std::vector<MeasuredShape>{{shape, speedup}} : cases;
  }
};

namespace detail {

// Readers for one key of an entry; false with `error` naming the key path.
struct EntryReader {
  std::string& error;

  bool string_at(const nlohmann::json& obj, const char* key, const std::string& path, bool required,
                 std::string& dst) const {
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
  }
  const nlohmann::json* object_at(const nlohmann::json& obj, const char* key, const std::string& path) const {
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_object()) {
      error = path + (it == obj.end() ? ": missing (required)" : ": expected an object");
      return nullptr;
    }
    return &*it;
  }
  bool bool_at(const nlohmann::json& obj, const char* key, const std::string& path, bool& dst) const {
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_boolean()) {
      error = path + (it == obj.end() ? ": missing (required)" : ": expected true or false");
      return false;
    }
    dst = it->get<bool>();
    return true;
  }
  bool number_at(const nlohmann::json& obj, const char* key, const std::string& path, double& dst) const {
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_number()) {
      error = path + (it == obj.end() ? ": missing (required)" : ": expected a number");
      return false;
    }
    dst = it->get<double>();
    return true;
  }
  bool dims_at(const nlohmann::json& dims, const std::string& path, std::map<std::string, int64_t>& dst) const {
    for (const auto& [k, v] : dims.items()) {
      if (!v.is_number_integer() ||
          (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
        error = path + "." + k + ": expected an integer";
        return false;
      }
      dst[k] = v.get<int64_t>();
    }
    return true;
  }
};

inline bool read_cases(const nlohmann::json& entry, const EntryReader& r, MatchCandidate& out) {
  auto cases = entry.find("cases");
  if (cases == entry.end() || cases->is_null()) return true;
  if (!cases->is_array()) {
    r.error = "cases: expected a list";
    return false;
  }
  for (size_t i = 0; i < cases->size(); ++i) {
    const std::string at = "cases[" + std::to_string(i) + "]";
    const nlohmann::json& c = (*cases)[i];
    if (!c.is_object()) {
      r.error = at + ": expected an object";
      return false;
    }
    MeasuredShape m;
    const nlohmann::json* dims = r.object_at(c, "dims", at + ".dims");
    if (dims == nullptr || !r.dims_at(*dims, at + ".dims", m.dims) ||
        !r.number_at(c, "speedup", at + ".speedup", m.speedup))
      return false;
    out.cases.push_back(std::move(m));
  }
  return true;
}

}  // namespace detail

// Reads one registry entry. False with `error` naming the key when a field the planner needs is missing
// or has the wrong type. An unknown evidence level is read as it is (the planner skips the entry with a
// warning). `source` is left kUnchecked: check_source() looks at the file.
inline bool read_candidate(const nlohmann::json& entry, MatchCandidate& out, std::string& error) {
  out = MatchCandidate{};
  if (!entry.is_object()) {
    error = "expected an object";
    return false;
  }
  detail::EntryReader r{error};
  if (!r.string_at(entry, "kernel_id", "kernel_id", true, out.kernel_id) ||
      !r.string_at(entry, "op", "op", true, out.op) || !r.string_at(entry, "dtype", "dtype", true, out.dtype) ||
      !r.string_at(entry, "target_gpu", "target_gpu", true, out.target_gpu) ||
      !r.string_at(entry, "language", "language", true, out.language) ||
      !r.string_at(entry, "source_path", "source_path", true, out.source_path) ||
      !r.string_at(entry, "evidence_level", "evidence_level", true, out.evidence_level) ||
      !r.string_at(entry, "created_at", "created_at", false, out.created_at) ||
      !r.string_at(entry, "source_sha256", "source_sha256", false, out.source_sha256))
    return false;
  const nlohmann::json* shape = r.object_at(entry, "shape", "shape");
  if (shape == nullptr || !r.dims_at(*shape, "shape", out.shape)) return false;
  const nlohmann::json* verification = r.object_at(entry, "verification", "verification");
  if (verification == nullptr || !r.bool_at(*verification, "passed", "verification.passed", out.verification_passed))
    return false;
  const nlohmann::json* bench = r.object_at(entry, "benchmark", "benchmark");
  if (bench == nullptr || !r.bool_at(*bench, "passed", "benchmark.passed", out.benchmark_passed) ||
      !r.number_at(*bench, "speedup", "benchmark.speedup", out.speedup) ||
      !r.string_at(*bench, "gpu_name", "benchmark.gpu_name", false, out.gpu_name))
    return false;
  return detail::read_cases(entry, r, out);
}

// Looks at the entry's source file, `source_path` relative to `registry_dir` (the folder holding
// verified_kernels.json): present and matching source_sha256, present without a hash to check, edited,
// or missing. A path that is absolute or climbs out with ".." counts as missing.
inline SourceCheck check_source(const std::string& registry_dir, const MatchCandidate& c) {
  const std::string& p = c.source_path;
  if (p.empty() || p.front() == '/') return SourceCheck::kMissing;
  for (size_t at = 0; at <= p.size();) {
    size_t slash = p.find('/', at);
    if (p.compare(at, slash == std::string::npos ? std::string::npos : slash - at, "..") == 0 &&
        (slash == std::string::npos ? p.size() - at : slash - at) == 2)
      return SourceCheck::kMissing;
    if (slash == std::string::npos) break;
    at = slash + 1;
  }
  std::ifstream in(registry_dir + "/" + p, std::ios::binary);
  if (!in) return SourceCheck::kMissing;
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return SourceCheck::kMissing;
  if (c.source_sha256.empty()) return SourceCheck::kUnhashed;
  return sha256_hex_portable(text.str()) == c.source_sha256 ? SourceCheck::kMatches : SourceCheck::kMismatch;
}

}  // namespace kiln::registry
