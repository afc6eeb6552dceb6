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
        "int f() {\n  // [EVOLVE_START]\n  return 2;\n  // [EVOLVE_END]\n}\n/* [EVOLVE_START] */\nint g;\n/* [EVOLVE_END] */\n");
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
