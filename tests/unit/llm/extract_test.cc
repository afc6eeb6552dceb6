#include "kiln/llm/extract.h"

#include <catch2/catch.hpp>

using kiln::llm::apply_reply;
using kiln::llm::last_code_block;

namespace {

const std::string kKernel =
    "#include <kiln/kernel_abi.h>\n"
    "// [EVOLVE_START]\n"
    "static int f() { return 1; }\n"
    "// [EVOLVE_END]\n"
    "extern \"C\" int kiln_entry(const kiln_args*) { return f() - 1; }\n";

std::string error_of(const kiln::Result<std::string>& r) {
  REQUIRE_FALSE(r.is_ok());
  return r.status().message();
}

}  // namespace

TEST_CASE("the last accepted fenced block is taken", "[llm]") {
  auto r =
      last_code_block("First:\n```python\nprint(1)\n```\nThen:\n```cpp\nint a;\n```\nAnd\n```c++\nint b;\n```\nbye");
  REQUIRE(r.is_ok());
  CHECK(*r == "int b;\n");
  auto py = last_code_block("```cuda\nint c;\n```\n```python\nx = 1\n```\n");
  REQUIRE(py.is_ok());
  CHECK(*py == "int c;\n");  // blocks in other languages are skipped
  auto bare = last_code_block("```\nint d;\n```");
  REQUIRE(bare.is_ok());
  CHECK(*bare == "int d;\n");
}

TEST_CASE("empty, truncated and unparseable replies say why", "[llm]") {
  CHECK(error_of(last_code_block("  \n")) == "empty reply");
  CHECK(error_of(last_code_block("```cpp\nint a;\n```", "length")) == "truncated reply (finish_reason \"length\")");
  CHECK(error_of(last_code_block("```cpp\nint a;\n")) == "truncated reply (unclosed code fence)");
  CHECK(error_of(last_code_block("Just use a faster algorithm.")) == "no fenced code block in the reply");
  CHECK(error_of(last_code_block("```cpp\n\n```")) == "empty code block");
}

TEST_CASE("only the EVOLVE region of the original kernel is replaced", "[llm]") {
  SECTION("a block with markers: the region between them") {
    auto r = apply_reply(kKernel,
                         "```cpp\n#include <evil.h>\n// [EVOLVE_START]\nstatic int f() { return 2; }\n// [EVOLVE_END]\n"
                         "int main() {}\n```\n");
    REQUIRE(r.is_ok());
    CHECK(r->find("return 2;") != std::string::npos);
    CHECK(r->find("evil") == std::string::npos);
    CHECK(r->find("int main") == std::string::npos);
    CHECK(r->find("extern \"C\" int kiln_entry") != std::string::npos);
  }
  SECTION("a block without markers: the whole block is the region") {
    auto r = apply_reply(kKernel, "```cuda\nstatic int f() { return 3; }\n```");
    REQUIRE(r.is_ok());
    CHECK(*r ==
          "#include <kiln/kernel_abi.h>\n// [EVOLVE_START]\nstatic int f() { return 3; }\n// [EVOLVE_END]\n"
          "extern \"C\" int kiln_entry(const kiln_args*) { return f() - 1; }\n");
  }
  SECTION("unbalanced markers in the reply are refused") {
    auto r = apply_reply(kKernel, "```cpp\n// [EVOLVE_START]\nint x;\n```");
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message().find("code block") == 0);
  }
}

TEST_CASE("every region of a kernel with several is replaced from the reply", "[llm][regions]") {
  const std::string two =
      "#include <kiln/kernel_abi.h>\n// [EVOLVE_START]\nstatic int f() { return 1; }\n// [EVOLVE_END]\n"
      "static int wrapper() { return f(); }\n/* [EVOLVE_START] */\nstatic int g() { return 2; }\n/* [EVOLVE_END] */\n"
      "extern \"C\" int kiln_entry(const kiln_args*) { return wrapper() + g() - 3; }\n";
  auto r = apply_reply(
      two,
      "Both, with the wrapper I would have liked:\n```cpp\n// [EVOLVE_START]\nstatic int f() { return 7; }\n"
      "// [EVOLVE_END]\nstatic int wrapper() { return evil(); }\n// [EVOLVE_START]\n"
      "static int g() { return 8; }\n// [EVOLVE_END]\n```\n");
  REQUIRE(r.is_ok());
  CHECK(*r ==
        "#include <kiln/kernel_abi.h>\n// [EVOLVE_START]\nstatic int f() { return 7; }\n// [EVOLVE_END]\n"
        "static int wrapper() { return f(); }\n/* [EVOLVE_START] */\nstatic int g() { return 8; }\n/* [EVOLVE_END] */\n"
        "extern \"C\" int kiln_entry(const kiln_args*) { return wrapper() + g() - 3; }\n");

  CHECK(error_of(apply_reply(two, "```cpp\n// [EVOLVE_START]\nstatic int f() { return 7; }\n// [EVOLVE_END]\n```")) ==
        "the code block has 1 editable region(s), the kernel 2");
  CHECK(error_of(apply_reply(two, "```cpp\nstatic int f() { return 7; }\n```")) ==
        "the code block has no [EVOLVE_START] / [EVOLVE_END] markers, but the kernel has 2 editable regions: each "
        "needs its own pair");
  CHECK(error_of(apply_reply(two,
                             "```cpp\n// [EVOLVE_START]\nint a;\n// [EVOLVE_END]\n// [EVOLVE_START]\n\n"
                             "// [EVOLVE_END]\n```")) == "empty EVOLVE region in the code block (region 2)");
}
