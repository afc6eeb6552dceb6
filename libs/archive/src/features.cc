#include "kiln/archive/features.h"

#include <algorithm>
#include <cctype>
#include <regex>

namespace kiln::archive {

namespace {

// One technique: any of its patterns found counts the group once.
struct Group {
  std::vector<std::regex> patterns;
};

Group group(std::initializer_list<const char*> patterns) {
  Group g;
  for (const char* p : patterns) g.patterns.emplace_back(p, std::regex::ECMAScript | std::regex::optimize);
  return g;
}

const std::vector<Group>& memory_groups() {
  static const std::vector<Group> kGroups{
      group({R"(__shared__)", R"(\b[A-Za-z_]*[Tt]ile[A-Za-z0-9_]*\b)", R"(\bTILE[A-Z0-9_]*\b)"}),
      group({R"(\b(float|int|uint|double|half|char)[24]\b)", R"(\b__ldg\b)", R"(\b_mm(256|512)?_loadu?_)",
             R"(\bvld1q?_)"}),
      group({R"(\b__restrict__\b)", R"(\b__restrict\b)", R"(\brestrict\b)"}),
      group({R"(\b__builtin_prefetch\b)", R"(\b_mm_prefetch\b)", R"(cp\.async)", R"(\bmemcpy_async\b)",
             R"(\b__pipeline_)"}),
      group({R"(\balignas\b)", R"(\b__align__\b)", R"(\b__builtin_assume_aligned\b)"}),
  };
  return kGroups;
}

const std::vector<Group>& compute_groups() {
  static const std::vector<Group> kGroups{
      group({R"(#\s*pragma\s+(GCC\s+)?unroll)", R"(\bUNROLL\b)"}),
      group({R"(\bfmaf?\b)", R"(\b__fmaf?_r[nzdu]\b)", R"(\b__fma_r[nzdu]\b)",
             R"(\b_mm(256|512)?_fn?m(add|sub)[a-z0-9_]*)"}),
      group({R"(\b__(expf|logf|sinf|cosf|fdividef|powf|frcp_r[nzdu]|frsqrt_rn)\b)", R"(\brsqrtf?\b)",
             R"(\b_mm(256|512)?_(?!loadu?_|fn?m)[a-z0-9_]+)", R"(\b__builtin_(?!prefetch|assume_aligned)[a-z_]+)"}),
      group({R"(\bwmma\b)", R"(\bmma_sync\b)", R"(\bw?mma\.)", R"(\bwgmma\b)", R"(\b__hmma)"}),
      group({R"(#\s*pragma\s+omp\s+(parallel\s+for\s+)?simd)", R"(#\s*pragma\s+GCC\s+ivdep)"}),
  };
  return kGroups;
}

const std::vector<Group>& parallelism_groups() {
  static const std::vector<Group> kGroups{
      group({R"(\bthreadIdx\b)", R"(\bblockIdx\b)", R"(\bblockDim\b)", R"(\bnum_threads\b)", R"(\bTHREADS\b)"}),
      group({R"(#\s*pragma\s+omp\s+parallel)", R"(\bstd::thread\b)", R"(\bstd::async\b)"}),
      group({R"(gridDim\.[xyz]\s*\*\s*blockDim\.[xyz])", R"(blockDim\.[xyz]\s*\*\s*gridDim\.[xyz])"}),
      group({R"(\b__shfl[a-z_]*)", R"(\bwarpSize\b)", R"(\b__syncwarp\b)", R"(\b__ballot_sync\b)",
             R"(\bcooperative_groups\b)"}),
      group({R"(\b__launch_bounds__\b)"}),
  };
  return kGroups;
}

int64_t level_of(const std::string& code, const std::vector<Group>& groups) {
  int64_t used = 0;
  for (const Group& g : groups) {
    bool hit = std::any_of(g.patterns.begin(), g.patterns.end(),
                           [&](const std::regex& re) { return std::regex_search(code, re); });
    if (hit) ++used;
  }
  return std::min<int64_t>(used, kLevels - 1);
}

}  // namespace

std::vector<std::string> default_dimensions() {
  return {std::string(dim::kMemory), std::string(dim::kCompute), std::string(dim::kParallelism),
          std::string(dim::kRegisters), std::string(dim::kSharedMemory)};
}

bool known_dimension(std::string_view name) {
  return name == dim::kMemory || name == dim::kCompute || name == dim::kParallelism || name == dim::kRegisters ||
         name == dim::kSharedMemory;
}

std::string strip_comments_and_strings(std::string_view src) {
  std::string out(src);
  enum class S { kCode, kLine, kBlock, kString, kChar } state = S::kCode;
  for (size_t i = 0; i < out.size(); ++i) {
    char c = out[i];
    char next = i + 1 < out.size() ? out[i + 1] : '\0';
    switch (state) {
      case S::kCode:
        if (c == '/' && next == '/') {
          state = S::kLine;
          out[i] = ' ';
        } else if (c == '/' && next == '*') {
          state = S::kBlock;
          out[i] = out[i + 1] = ' ';
          ++i;
        } else if (c == '"') {
          state = S::kString;
        } else if (c == '\'') {
          state = S::kChar;
        }
        break;
      case S::kLine:
        if (c == '\n')
          state = S::kCode;
        else
          out[i] = ' ';
        break;
      case S::kBlock:
        if (c == '*' && next == '/') {
          out[i] = out[i + 1] = ' ';
          ++i;
          state = S::kCode;
        } else if (c != '\n') {
          out[i] = ' ';
        }
        break;
      case S::kString:
      case S::kChar: {
        const char quote = state == S::kString ? '"' : '\'';
        if (c == '\\' && i + 1 < out.size()) {
          out[i] = ' ';
          if (out[i + 1] != '\n') out[i + 1] = ' ';
          ++i;
        } else if (c == quote || c == '\n') {
          state = S::kCode;  // an unterminated literal ends at the line, as the compiler would complain
        } else {
          out[i] = ' ';
        }
        break;
      }
    }
  }
  return out;
}

std::map<std::string, int64_t> static_levels(std::string_view source) {
  const std::string code = strip_comments_and_strings(source);
  return {{std::string(dim::kMemory), level_of(code, memory_groups())},
          {std::string(dim::kCompute), level_of(code, compute_groups())},
          {std::string(dim::kParallelism), level_of(code, parallelism_groups())}};
}

int64_t register_bucket(int64_t registers) {
  // Bucket edges after the occupancy steps of recent GPUs: 32, 64 and 128 registers per thread.
  if (registers <= 32) return 0;
  if (registers <= 64) return 1;
  if (registers <= 128) return 2;
  return 3;
}

int64_t shared_bytes_bucket(int64_t bytes) {
  constexpr int64_t kSmallBytes = 16 << 10;
  constexpr int64_t kDefaultLimitBytes = 48 << 10;  // the static shared-memory limit without opt-in
  if (bytes <= 0) return 0;
  if (bytes <= kSmallBytes) return 1;
  if (bytes <= kDefaultLimitBytes) return 2;
  return 3;
}

std::vector<int64_t> coordinates(const std::vector<std::string>& dimensions, std::string_view source, int64_t registers,
                                 int64_t shared_bytes) {
  const auto levels = static_levels(source);
  std::vector<int64_t> out;
  out.reserve(dimensions.size());
  for (const std::string& d : dimensions) {
    if (auto it = levels.find(d); it != levels.end())
      out.push_back(it->second);
    else if (d == dim::kRegisters)
      out.push_back(register_bucket(registers));
    else if (d == dim::kSharedMemory)
      out.push_back(shared_bytes_bucket(shared_bytes));
    else
      out.push_back(0);
  }
  return out;
}

std::string cell_key(const std::vector<std::string>& dimensions, const std::vector<int64_t>& coords) {
  std::string out;
  for (size_t i = 0; i < dimensions.size() && i < coords.size(); ++i) {
    if (!out.empty()) out.push_back(',');
    out += dimensions[i] + "=" + std::to_string(coords[i]);
  }
  return out;
}

int64_t code_lines(std::string_view source) {
  const std::string code = strip_comments_and_strings(source);
  int64_t lines = 0;
  bool has_code = false;
  for (char c : code) {
    if (c == '\n') {
      lines += has_code ? 1 : 0;
      has_code = false;
    } else if (!std::isspace(static_cast<unsigned char>(c))) {
      has_code = true;
    }
  }
  return lines + (has_code ? 1 : 0);
}

double behaviour_diversity(const std::vector<int64_t>& coords, const std::vector<std::vector<int64_t>>& others) {
  if (coords.empty() || others.empty()) return 0;
  const double widest = static_cast<double>(coords.size()) * static_cast<double>(kLevels - 1);
  double total = 0;
  for (const auto& other : others) {
    int64_t distance = 0;
    for (size_t i = 0; i < coords.size(); ++i) {
      const int64_t theirs = i < other.size() ? other[i] : 0;
      distance += coords[i] > theirs ? coords[i] - theirs : theirs - coords[i];
    }
    total += static_cast<double>(distance);
  }
  return std::min(1.0, total / static_cast<double>(others.size()) / widest);
}

}  // namespace kiln::archive
