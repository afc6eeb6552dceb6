#include "kiln/compiler/lean_headers.h"

#include <array>
#include <cctype>

#include "kiln/compiler/batch.h"

namespace kiln::compiler {
namespace {

constexpr std::string_view kSpecfunGuard = "-D_GLIBCXX_BITS_SPECFUN_H";
constexpr std::string_view kAbiHeader = "kiln/kernel_abi.h";

// The mathematical special functions of C++17 (each also with an f and an l suffix).
constexpr std::array<std::string_view, 21> kSpecialFunctions = {
    "assoc_laguerre", "assoc_legendre", "beta",         "comp_ellint_1", "comp_ellint_2", "comp_ellint_3",
    "cyl_bessel_i",   "cyl_bessel_j",   "cyl_bessel_k", "cyl_neumann",   "ellint_1",      "ellint_2",
    "ellint_3",       "expint",         "hermite",      "laguerre",      "legendre",      "riemann_zeta",
    "sph_bessel",     "sph_legendre",   "sph_neumann"};

// Prefixes of the CUDA toolkit's headers: a lean build without the prelude compiled with each of them
// (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h, cooperative_groups.h and /reduce.h, mma.h, cub/cub.cuh,
// cuda/pipeline, cuda/barrier, cuda/std/..., thrust/device_vector.h, curand_kernel.h, ...).
constexpr std::array<std::string_view, 12> kToolkitHeaders = {"cuda",    "cooperative_groups",
                                                              "cub/",    "thrust/",
                                                              "mma.h",   "math_constants.h",
                                                              "curand",  "sm_",
                                                              "crt/",    "device_",
                                                              "vector_", "nv/"};

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool blank(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

// A special function's name (or its f or l variant), or an identifier of the library's own (starting with
// "__") that holds one (std::__detail::__riemann_zeta).
bool special_function(std::string_view id) {
  for (std::string_view f : kSpecialFunctions) {
    if (id == f) return true;
    if (id.size() == f.size() + 1 && id.starts_with(f) && (id.back() == 'f' || id.back() == 'l')) return true;
    if (id.starts_with("__") && id.find(f) != std::string_view::npos) return true;
  }
  return false;
}

// Names the skipped headers define or reach (gcc 12's macros that a lean build loses, by prefix where
// the library names them so) and the library's internal namespaces: a source that reads one is built as
// it is.
constexpr std::array<std::string_view, 7> kLibraryPrefixes = {"_GLIBCXX", "__glibcxx", "__cpp_lib_", "__STDCPP_",
                                                              "_STL_",    "__gnu_cxx", "__detail"};
constexpr std::array<std::string_view, 8> kLibraryNames = {"_CONCEPT_CHECK_H",
                                                           "_EXCEPTION_DEFINES_H",
                                                           "_EXT_NUMERIC_TRAITS",
                                                           "_FUNCTEXCEPT_H",
                                                           "_PTR_TRAITS_H",
                                                           "__catch",
                                                           "__try",
                                                           "__throw_exception_again"};

bool library_name(std::string_view id) {
  for (std::string_view p : kLibraryPrefixes) {
    if (id.starts_with(p)) return true;
  }
  for (std::string_view n : kLibraryNames) {
    if (id == n) return true;
  }
  return false;
}

struct Scan {
  bool names_std = false;         // the identifier std, anywhere, or a ## that could make it
  bool names_special = false;     // a special function's name, anywhere
  bool names_library = false;     // library_name
  bool includes_unknown = false;  // an #include that is not a package file, the ABI header or CUDA's
};

void scan_identifiers(std::string_view text, Scan& s) {
  if (text.find("##") != std::string_view::npos) s.names_std = true;  // std may be pasted together
  size_t i = 0;
  while (i < text.size()) {
    if (!ident_start(text[i]) || (i > 0 && ident_char(text[i - 1]))) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && ident_char(text[end])) ++end;
    const std::string_view id = text.substr(i, end - i);
    size_t before = i;
    while (before > 0 && blank(text[before - 1])) --before;
    if (id == "std") {
      s.names_std = true;
    } else if ((id == "include_next" || id == "import") && before > 0 && text[before - 1] == '#') {
      s.includes_unknown = true;  // a directive source_directives does not list
    } else if (library_name(id)) {
      s.names_library = true;
    } else if (special_function(id)) {
      s.names_special = true;
    }
    i = end;
  }
}

bool known_include(const std::string& include, const std::map<std::string, std::string>& files) {
  if (include.size() < 2) return false;  // #include MACRO: whatever it names is unknown here
  const std::string target = include.substr(1, include.size() - 2);
  if (include.front() == '"' && (target == kAbiHeader || files.count(target) > 0)) return true;
  if (include.front() != '"' && include.front() != '<') return false;
  for (std::string_view prefix : kToolkitHeaders) {
    if (target.starts_with(prefix)) return true;
  }
  return false;
}

}  // namespace

LeanHeaders lean_headers(const std::map<std::string, std::string>& files,
                         const std::map<std::string, std::string>& defines) {
  Scan s;
  for (const auto& [file_name, content] : files) {
    const std::string text = preprocessor_text(content);
    scan_identifiers(text, s);
    for (const auto& include : preprocessed_directives(text).includes) {
      if (!known_include(include, files)) s.includes_unknown = true;
    }
  }
  for (const auto& [macro, value] : defines) scan_identifiers(macro + " " + value, s);
  if (s.names_library || (s.names_std && s.names_special)) return LeanHeaders::kOff;
  if (s.names_std || s.includes_unknown) return LeanHeaders::kPrelude;
  return LeanHeaders::kSkipOnly;
}

std::vector<std::string> lean_header_flags(LeanHeaders lean) {
  switch (lean) {
    case LeanHeaders::kOff: return {};
    case LeanHeaders::kPrelude: return {std::string(kSpecfunGuard), "-include", std::string(kLeanPreludePath)};
    case LeanHeaders::kSkipOnly: return {std::string(kSpecfunGuard)};
  }
  return {};
}

std::string_view lean_prelude() {
  return "/* Kiln's lean build (-D_GLIBCXX_BITS_SPECFUN_H skips the C++17 special math functions): what\n"
         "   <bits/specfun.h> brings besides them, included ahead of the source. */\n"
         "#include <limits>\n"
         "#include <type_traits>\n"
         "#if defined(__has_include)\n"
         "#if __has_include(<bits/stl_algobase.h>)\n"
         "#include <bits/stl_algobase.h>\n"
         "#endif\n"
         "#endif\n";
}

}  // namespace kiln::compiler
