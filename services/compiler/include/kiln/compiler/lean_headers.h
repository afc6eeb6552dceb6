// A build without the C++17 special math functions, where the sources cannot name them.
//
// In C++17, libstdc++'s <cmath> brings the mathematical special functions (std::riemann_zeta,
// std::cyl_bessel_j and the rest: <bits/specfun.h> and the tr1 templates behind it, about 10,000 lines).
// cuda_runtime.h includes <cmath>, so every CUDA build parses them three times (cudafe++, cicc and the host
// compiler), though they are host functions no kernel can call: a fifth to a quarter of the CPU of a bundled
// task's build. A lean build defines the include guard of <bits/specfun.h>, so the header is skipped.
//
// What <bits/specfun.h> brings besides the special functions (<limits> and <bits/stl_algobase.h>:
// std::numeric_limits, std::min and std::max, the iterator basics) would then be missing too. Code that
// names nothing of namespace std cannot reach it; code that does gets it back from a prelude, included
// after cuda_runtime.h and before the source (kLeanPreludePath). So a source sees what it saw before, but
// the special functions. Where the sources may call those (or read the macros that announce them), the
// build is not lean. The device code is the same either way (test_compiler "[lean]" compares the PTX).
//
// Only CUDA builds are lean: cuda_runtime.h includes <cmath> in every one, so the prelude gives back
// exactly what a build had before. A C++ build (the CPU backend) has no such header, and the prelude
// would add to what its source sees (its own max or swap beside std's, after using namespace std).
// A host library other than libstdc++ ignores the guard; the prelude includes nothing it lacks.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::compiler {

enum class LeanHeaders {
  kOff,       // the build as it is: the sources may name the special functions, or lean builds are off
  kPrelude,   // specfun.h skipped, the rest of what it brings included by the prelude
  kSkipOnly,  // specfun.h skipped: nothing in the sources names namespace std, and every header is known
};

// How lean the build of these files can be: the package's sources and headers, the source being built
// among them, and the build's -D names and values. Every file is read as C++ text (comments aside,
// string literals included: a name in a string counts, which errs on the safe side).
//   kOff: "std" appears (or a ##, which could paste it) together with a special function's name in any
//         role (riemann_zeta, as a call, a pointer, a template or a parameter's value), or the text names
//         something of the library's own that a lean build loses: its macros and include guards
//         (_GLIBCXX..., __glibcxx..., _STL_..., __try, __catch...), __cpp_lib_... and __STDCPP_... feature
//         macros, __gnu_cxx, __detail.
//   kSkipOnly: no "std" (nor ##) anywhere, and every #include is a package file, the kernel ABI header or
//         a header of the CUDA toolkit (cuda..., cooperative_groups..., cub/, thrust/, mma.h,
//         math_constants.h, curand..., sm_..., crt/, device_..., vector_..., nv/): more than a hundred of
//         those were built this way in a review. (#include_next and #import count as unknown.)
//   kPrelude: otherwise.
// A source that names std only through macros of its own (#define NS s##td) is caught by the ##; one
// that hides it some other way fails to compile (std has no member min), it does not change meaning.
LeanHeaders lean_headers(const std::map<std::string, std::string>& files,
                         const std::map<std::string, std::string>& defines);

// The flags that make a build lean (none for kOff). The prelude's path is relative to the build folder.
std::vector<std::string> lean_header_flags(LeanHeaders lean);

inline constexpr std::string_view kLeanPreludePath = "kiln/lean_prelude.h";
std::string_view lean_prelude();

}  // namespace kiln::compiler
