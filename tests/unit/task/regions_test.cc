#include <catch2/catch.hpp>

#include "kiln/task/task.h"

using kiln::task::find_regions;
using kiln::task::region_text;
using kiln::task::replace_region;

namespace {
const std::string kSource =
    "int f() {\n"
    "  // [EVOLVE_START]\n"
    "  return 1;\n"
    "  // [EVOLVE_END]\n"
    "}\n"
    "/* [EVOLVE_START] */\n"
    "int g;\n"
    "/* [EVOLVE_END] */\n";
}  // namespace

TEST_CASE("regions are found between marker lines", "[task]") {
  auto regions = find_regions(kSource);
  REQUIRE(regions.is_ok());
  REQUIRE(regions->size() == 2);
  CHECK(region_text(kSource, (*regions)[0]) == "  return 1;\n");
  CHECK(region_text(kSource, (*regions)[1]) == "int g;\n");
}

TEST_CASE("replace_region swaps the content and keeps the markers", "[task]") {
  auto out = replace_region(kSource, "  return 2;", 0);
  REQUIRE(out.is_ok());
  CHECK(*out ==
        "int f() {\n  // [EVOLVE_START]\n  return 2;\n  // [EVOLVE_END]\n}\n/* [EVOLVE_START] */\nint g;\n/* "
        "[EVOLVE_END] */\n");
  auto second = replace_region(*out, "int h;\n", 1);
  REQUIRE(second.is_ok());
  CHECK(second->find("int h;\n/* [EVOLVE_END] */") != std::string::npos);
  CHECK(second->find("return 2;") != std::string::npos);
  auto emptied = replace_region(kSource, "", 0);
  REQUIRE(emptied.is_ok());
  CHECK(emptied->find("// [EVOLVE_START]\n  // [EVOLVE_END]") != std::string::npos);

  CHECK_FALSE(replace_region(kSource, "x", 2).is_ok());
  CHECK_FALSE(replace_region(kSource, "// [EVOLVE_END]\nevil();\n// [EVOLVE_START]\n", 0).is_ok());
}

TEST_CASE("malformed markers are errors with a line number", "[task]") {
  CHECK(find_regions("int x;\n").status().message() == "no [EVOLVE_START] ... [EVOLVE_END] region");
  CHECK(find_regions("// [EVOLVE_END]\n").status().message() ==
        "line 1: [EVOLVE_END] without a matching [EVOLVE_START]");
  CHECK(find_regions("// [EVOLVE_START]\n// [EVOLVE_START]\n// [EVOLVE_END]\n").status().message() ==
        "line 2: nested [EVOLVE_START] (region opened on line 1 is not closed)");
  CHECK(find_regions("x;\n// [EVOLVE_START]\ny;\n").status().message() ==
        "line 2: [EVOLVE_START] is never closed by [EVOLVE_END]");
  CHECK(find_regions("int a; // [EVOLVE_START]\n// [EVOLVE_END]\n").status().message() ==
        "line 1: [EVOLVE_START] must be in a comment on its own line");
  CHECK(find_regions("const char* s = \"[EVOLVE_START]\";\n").status().message() ==
        "line 1: [EVOLVE_START] must be in a comment on its own line");
}

// ------------------------------------------------------------------------- proposals

namespace {

using kiln::task::accept_proposal;
using kiln::task::check_regions_only;
using kiln::task::region_bodies;
using kiln::task::splice_regions;

// Two regions, as a task's kernel: everything outside them is the task's.
const std::string kKernel =
    "#include <kiln/kernel_abi.h>\n"                                                    // 1
    "// [EVOLVE_START]\n"                                                               // 2
    "static int f() { return 1; }\n"                                                    // 3
    "// [EVOLVE_END]\n"                                                                 // 4
    "static int wrapper() { return f(); }\n"                                            // 5
    "// [EVOLVE_START]\n"                                                               // 6
    "static int g() { return 2; }\n"                                                    // 7
    "// [EVOLVE_END]\n"                                                                 // 8
    "extern \"C\" int kiln_entry(const kiln_args*) { return wrapper() + g() - 3; }\n";  // 9

std::string reason(const kiln::Status& st) {
  REQUIRE_FALSE(st.is_ok());
  CHECK(st.code() == kiln::StatusCode::kInvalidArgument);
  return st.message();
}

std::string with(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("a proposal may rewrite every region and nothing else", "[task][regions]") {
  SECTION("both regions edited, as a whole file or as bodies, give the same kernel") {
    const std::string file = with(with(kKernel, "return 1;", "return 10 - 9;"), "return 2;", "return 4 / 2;");
    CHECK(check_regions_only(kKernel, file).is_ok());
    auto spliced = splice_regions(kKernel, {"static int f() { return 10 - 9; }\n", "static int g() { return 4 / 2; }"});
    REQUIRE(spliced.is_ok());
    CHECK(*spliced == file);  // a body without its last newline gets one
    CHECK(region_bodies(*spliced).value() ==
          std::vector<std::string>{"static int f() { return 10 - 9; }\n", "static int g() { return 4 / 2; }\n"});
    CHECK(accept_proposal(kKernel, file, {}).value() == file);
    CHECK(accept_proposal(kKernel, "", {"int a;\n", "int b;\n"}).value() ==
          splice_regions(kKernel, {"int a;\n", "int b;\n"}).value());
  }
  SECTION("regions may grow, shrink or be emptied") {
    CHECK(check_regions_only(kKernel, with(kKernel, "static int g() { return 2; }\n", "")).is_ok());
    CHECK(check_regions_only(kKernel, with(kKernel, "return 1; }\n", "return 1; }\n#define X 1\nint h;\n\n")).is_ok());
    CHECK(check_regions_only(kKernel, kKernel).is_ok());
  }
}

TEST_CASE("a proposal that changes anything outside the regions is refused with the line", "[task][regions]") {
  SECTION("an edit of the wrapper between the regions") {
    std::string file = with(kKernel, "return f(); }", "return f() + evil(); }");
    CHECK(reason(check_regions_only(kKernel, file)) ==
          "the proposal changed code outside the editable regions (line 5: \"static int wrapper() { return f() + "
          "evil(); }\" where the task's kernel has \"static int wrapper() { return f(); }\")");
  }
  SECTION("an added include: the line is the candidate's") {
    std::string file = "#include <evil.h>\n" + kKernel;
    CHECK(reason(check_regions_only(kKernel, file)) ==
          "the proposal changed code outside the editable regions (line 1: \"#include <evil.h>\" where the task's "
          "kernel has \"#include <kiln/kernel_abi.h>\")");
  }
  SECTION("code after the end of the task's kernel, or the end cut off") {
    CHECK(reason(check_regions_only(kKernel, kKernel + "int main() {}\n")) ==
          "the proposal changed code outside the editable regions (line 10: \"int main() {}\" after the end of the "
          "task's kernel)");
    std::string cut = kKernel.substr(0, kKernel.find("extern"));
    CHECK(reason(check_regions_only(kKernel, cut)) ==
          "the proposal changed code outside the editable regions (line 9: the file ends where the task's kernel has "
          "\"extern \"C\" int kiln_entry(const kiln_args*) { return wrapper() + g() - 3; }\")");
  }
  SECTION("a removed or added marker") {
    std::string no_end =
        with(kKernel, "static int g() { return 2; }\n// [EVOLVE_END]\n", "static int g() { return 2; }\n");
    CHECK(reason(check_regions_only(kKernel, no_end)) ==
          "the proposal changed code outside the editable regions: its region markers are broken (line 6: "
          "[EVOLVE_START] is never closed by [EVOLVE_END])");
    std::string merged =
        with(kKernel, "// [EVOLVE_END]\nstatic int wrapper() { return f(); }\n// [EVOLVE_START]\n", "");
    CHECK(reason(check_regions_only(kKernel, merged)) ==
          "the proposal changed code outside the editable regions: it has 1 editable region where the task's kernel "
          "has 2 (a marker line was added or removed)");
    std::string third = kKernel + "// [EVOLVE_START]\nint h;\n// [EVOLVE_END]\n";
    CHECK(reason(check_regions_only(kKernel, third)).find("it has 3 editable regions where the task's kernel has 2") !=
          std::string::npos);
  }
  SECTION("a marker line rewritten is a change outside the regions") {
    std::string file = with(kKernel, "// [EVOLVE_START]\nstatic int g", "/* [EVOLVE_START] */\nstatic int g");
    CHECK(reason(check_regions_only(kKernel, file)).find("(line 6: \"/* [EVOLVE_START] */\" where") !=
          std::string::npos);
  }
}

TEST_CASE("whitespace outside the regions counts, and the reason says only whitespace differs", "[task][regions]") {
  const std::string note =
      "; only whitespace differs there, but outside the regions the file must match the task's byte for byte";
  std::string indented = with(kKernel, "static int wrapper", "  static int wrapper");
  CHECK(
      reason(check_regions_only(kKernel, indented)) ==
      "the proposal changed code outside the editable regions (line 5: \"static int wrapper() { return f(); }\" where "
      "the task's kernel has \"static int wrapper() { return f(); }\")" +
          note);
  std::string crlf = with(kKernel, "#include <kiln/kernel_abi.h>\n", "#include <kiln/kernel_abi.h>\r\n");
  CHECK(reason(check_regions_only(kKernel, crlf)).ends_with(note));
  std::string blank_line = with(kKernel, "extern", "\nextern");
  CHECK(reason(check_regions_only(kKernel, blank_line)).ends_with(note));
  std::string no_newline = kKernel.substr(0, kKernel.size() - 1);
  CHECK(reason(check_regions_only(kKernel, no_newline)).ends_with(note));
  // Inside a region, whitespace is the proposer's business.
  CHECK(check_regions_only(kKernel, with(kKernel, "static int f()", "\tstatic   int f()")).is_ok());
}

TEST_CASE("region bodies must fit the task's kernel", "[task][regions]") {
  CHECK(reason(splice_regions(kKernel, {"int a;\n"}).status()) ==
        "the proposal has 1 region body where the task's kernel has 2 editable regions");
  CHECK(reason(splice_regions(kKernel, {"int a;\n", "int b;\n", "int c;\n"}).status()) ==
        "the proposal has 3 region bodies where the task's kernel has 2 editable regions");
  CHECK(reason(splice_regions(kKernel, {"int a;\n", "// [EVOLVE_END]\nevil();\n// [EVOLVE_START]\n"}).status()) ==
        "the new body of region 2 contains an [EVOLVE_START] or [EVOLVE_END] marker");
  CHECK(reason(accept_proposal(kKernel, kKernel, {"int a;\n", "int b;\n"}).status()) ==
        "the proposal has both a whole file and region bodies");
  CHECK(reason(accept_proposal(kKernel, "", {}).status()) == "the proposal has no code");
}
