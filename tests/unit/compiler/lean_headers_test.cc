#include "kiln/compiler/lean_headers.h"

#include <catch2/catch.hpp>
#include <map>
#include <string>

#include "kiln/task/task.h"

using kiln::compiler::lean_header_flags;
using kiln::compiler::lean_headers;
using kiln::compiler::LeanHeaders;

namespace {

using Files = std::map<std::string, std::string>;

// A kernel whose launcher holds `launcher`, after `includes`.
Files kernel_with(const std::string& includes, const std::string& launcher) {
  return {{"kernel.cu", includes +
                            "#include \"kiln/kernel_abi.h\"\n"
                            "__global__ void k(float* y) { y[threadIdx.x] = 1.f; }\n"
                            "extern \"C\" int kiln_entry(const kiln_args* a) {\n" +
                            launcher + "\n  return 0;\n}\n"}};
}

LeanHeaders lean_of(const Files& files, const std::map<std::string, std::string>& defines = {}) {
  return lean_headers(files, defines);
}

Files package(const std::string& name) {
  auto loaded = kiln::task::load_package(std::string(KILN_SOURCE_DIR "/configs/tasks/") + name);
  REQUIRE(loaded.is_ok());
  Files files;
  for (const auto& [file, content] : *loaded) {
    if (file != "task.yaml" && file != "instructions.md") files[file] = content.data;
  }
  return files;
}

}  // namespace

TEST_CASE("the bundled CUDA tasks build without specfun.h", "[lean]") {
  for (const char* task : {"cuda_reduce_sum", "cuda_rmsnorm", "cuda_sgemm", "cuda_softmax", "cuda_transpose"}) {
    INFO(task);
    CHECK(lean_of(package(task)) == LeanHeaders::kSkipOnly);
  }
  // The C++ kernels call std::exp and std::sqrt after #include <cmath> (the compiler builds them as they
  // are: only CUDA builds are lean).
  for (const char* task : {"rmsnorm", "sgemm", "softmax"}) {
    INFO(task);
    CHECK(lean_of(package(task)) == LeanHeaders::kPrelude);
  }
}

TEST_CASE("a source that names std or includes a header of its own gets the prelude", "[lean]") {
  CHECK(lean_of(kernel_with("", "  k<<<1, 32>>>(nullptr);")) == LeanHeaders::kSkipOnly);
  CHECK(lean_of(kernel_with("", "  k<<<1, std::min(32, 64)>>>(nullptr);")) == LeanHeaders::kPrelude);
  CHECK(lean_of(kernel_with("", "  using namespace std; k<<<1, 32>>>(nullptr);")) == LeanHeaders::kPrelude);
  // Any header that is not the toolkit's.
  CHECK(lean_of(kernel_with("#include <cstdio>\n", "  k<<<1, 32>>>(nullptr);")) == LeanHeaders::kPrelude);
  CHECK(lean_of(kernel_with("#include <cuda_fp16.h>\n#include <cub/cub.cuh>\n", "  k<<<1, 32>>>(nullptr);")) ==
        LeanHeaders::kSkipOnly);
  // A header of the package is read like the source; one it does not hold, or a macro's, is unknown.
  Files with_header = kernel_with("#include \"tile.cuh\"\n", "  k<<<1, TILE>>>(nullptr);");
  with_header["tile.cuh"] = "#define TILE 32\n";
  CHECK(lean_of(with_header) == LeanHeaders::kSkipOnly);
  with_header["tile.cuh"] = "#define TILE std::max(32, 16)\n";
  CHECK(lean_of(with_header) == LeanHeaders::kPrelude);
  CHECK(lean_of(kernel_with("#include \"missing.cuh\"\n", "")) == LeanHeaders::kPrelude);
  CHECK(lean_of(kernel_with("#define HEADER <cstdio>\n#include HEADER\n", "")) == LeanHeaders::kPrelude);
  CHECK(lean_of(kernel_with("# include_next <cuda_fp16.h>\n", "")) == LeanHeaders::kPrelude);
  // A parameter's value is read too.
  CHECK(lean_of(kernel_with("", "  k<<<1, WIDTH>>>(nullptr);"), {{"WIDTH", "std"}}) == LeanHeaders::kPrelude);
  // Comments are not code.
  CHECK(lean_of(kernel_with("// std::min would do\n/* std::riemann_zeta(2.0) */\n", "")) == LeanHeaders::kSkipOnly);
  // std hidden from a reader that does not preprocess: pasted, split by a splice with blanks, or behind a
  // raw string that holds a comment's opening.
  CHECK(lean_of(kernel_with("#define CAT(a, b) a##b\n", "  k<<<1, CAT(s, td)::min(32, 64)>>>(nullptr);")) ==
        LeanHeaders::kPrelude);
  CHECK(lean_of(kernel_with("", "  k<<<1, st\\ \nd::min(32, 64)>>>(nullptr);")) == LeanHeaders::kPrelude);
  CHECK(lean_of(kernel_with("",
                            "  const char* q = R\"(\")\"; const char* o = \"/*\";\n"
                            "  k<<<1, std::min(32, 64)>>>(nullptr); /* end */")) == LeanHeaders::kPrelude);
}

TEST_CASE("a source that may call a special function or reads the library's macros is built as it is", "[lean]") {
  CHECK(lean_of(kernel_with("#include <cmath>\n", "  double z = std::riemann_zeta(2.0); (void)z;")) ==
        LeanHeaders::kOff);
  CHECK(lean_of(kernel_with("#include <cmath>\n", "  auto f = &std::cyl_bessel_jf; (void)f;")) == LeanHeaders::kOff);
  CHECK(lean_of(kernel_with("#include <cmath>\nusing namespace std;\n", "  double b = beta (1.0, 2.0); (void)b;")) ==
        LeanHeaders::kOff);
  CHECK(lean_of(kernel_with("#include <cmath>\nusing std::expint;\n", "")) == LeanHeaders::kOff);
  // Reached without a call or a qualified name: a pointer, a template, a macro, a parameter's value, the
  // library's own names.
  CHECK(lean_of(kernel_with("#include <cmath>\nusing namespace std;\n",
                            "  double (*zeta)(double) = riemann_zeta; (void)zeta;")) == LeanHeaders::kOff);
  CHECK(lean_of(kernel_with("#include <cmath>\nusing namespace std;\n", "  (void)riemann_zeta<double>(2.0);")) ==
        LeanHeaders::kOff);
  CHECK(lean_of(kernel_with("#include <cmath>\n#define MATH(f) std::f\n", "  (void)MATH(riemann_zeta)(2.0);")) ==
        LeanHeaders::kOff);
  CHECK(lean_of(kernel_with("#include <cmath>\n", "  (void)std::FN(2.0);"), {{"FN", "riemann_zeta"}}) ==
        LeanHeaders::kOff);
  CHECK(lean_of(kernel_with("#include <cmath>\n", "  (void)std::__detail::__riemann_zeta<double>(2.0);")) ==
        LeanHeaders::kOff);
  // Beside std even a number named beta keeps every header: whether it is the function cannot be told.
  CHECK(lean_of(kernel_with("", "  const float beta = 0.5f; k<<<1, std::min(32, int(beta))>>>(nullptr);")) ==
        LeanHeaders::kOff);
  // Without std the names are the source's own, whatever it does with them.
  CHECK(lean_of(kernel_with("__device__ float beta(float x) { return x; }\n", "")) == LeanHeaders::kSkipOnly);
  CHECK(lean_of(kernel_with("", "  const float beta = 0.5f; k<<<1, int(beta * 64)>>>(nullptr);")) ==
        LeanHeaders::kSkipOnly);
  // What the skipped headers define, read without std: their macros and include guards.
  for (const char* macro :
       {"__cpp_lib_math_special_functions", "__STDCPP_MATH_SPEC_FUNCS__", "__STDCPP_WANT_MATH_SPEC_FUNCS__",
        "_GLIBCXX_USE_STD_SPEC_FUNCS", "__gnu_cxx", "_STL_ALGOBASE_H", "__glibcxx_requires_nonempty", "__try",
        "__catch", "_EXCEPTION_DEFINES_H"}) {
    INFO(macro);
    CHECK(lean_of(kernel_with(std::string("#ifdef ") + macro + "\n#endif\n", "")) == LeanHeaders::kOff);
  }
}

TEST_CASE("a lean build defines specfun.h's guard and the prelude brings back the rest", "[lean]") {
  CHECK(lean_header_flags(LeanHeaders::kOff).empty());
  CHECK(lean_header_flags(LeanHeaders::kSkipOnly) == std::vector<std::string>{"-D_GLIBCXX_BITS_SPECFUN_H"});
  CHECK(lean_header_flags(LeanHeaders::kPrelude) ==
        std::vector<std::string>{"-D_GLIBCXX_BITS_SPECFUN_H", "-include", "kiln/lean_prelude.h"});
  const std::string prelude(kiln::compiler::lean_prelude());
  CHECK(prelude.find("#include <limits>") != std::string::npos);
  CHECK(prelude.find("#include <bits/stl_algobase.h>") != std::string::npos);
  CHECK(prelude.find("__has_include(<bits/stl_algobase.h>)") != std::string::npos);
}
