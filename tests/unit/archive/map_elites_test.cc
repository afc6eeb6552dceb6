// MAP-Elites: behaviour descriptors, cells, islands and migration, and parent selection.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "kiln/archive/archive.h"
#include "kiln/archive/features.h"

using namespace kiln;
using namespace kiln::archive;

namespace {

proto::Program program(const std::string& id, const std::string& code, double score, int64_t island = 0) {
  proto::Program p;
  p.id = id;
  p.code = code;
  p.eval.perf_score = 5;
  p.eval.correctness = true;
  p.eval.combined_score = score;
  p.metadata["island"] = std::to_string(island);
  return p;
}

const std::string kPlain = "void f(float* y) { for (int i = 0; i < 8; ++i) y[i] = 0; }\n";
const std::string kParallel =
    "void f(float* y) {\n#pragma omp parallel for\n for (int i = 0; i < 8; ++i) y[i] = 0; }\n";
const std::string kVector = "void f(float* __restrict__ y) { float4 v; (void)v; }\n";

MapElitesOptions static_dims(int64_t islands = 1, int64_t interval = 0) {
  MapElitesOptions o;
  o.dimensions = {"memory", "compute", "parallelism"};
  o.islands = islands;
  o.migration_interval = interval;
  return o;
}

}  // namespace

TEST_CASE("static levels ignore comments and strings", "[archive][map_elites]") {
  CHECK(strip_comments_and_strings("a // __shared__\nb /* float4 */ c \"fma\" 'x'") ==
        "a" + std::string(14, ' ') + "\nb" + std::string(14, ' ') + "c \"   \" ' '");
  auto plain = static_levels("// __shared__ float4 __restrict__ #pragma unroll threadIdx\nint x = \"__shfl\";\n");
  CHECK(plain.at("memory") == 0);
  CHECK(plain.at("compute") == 0);
  CHECK(plain.at("parallelism") == 0);

  auto cuda = static_levels(
      "__global__ void __launch_bounds__(256) k(const float4* __restrict__ x, float* y) {\n"
      "  __shared__ float tile[256];\n"
      "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {\n"
      "#pragma unroll\n"
      "    y[i] = fmaf(x[i].x, 2.f, __expf(1.f));\n"
      "    v += __shfl_down_sync(0xffffffff, v, 16);\n"
      "  }\n}\n");
  CHECK(cuda.at("memory") == 3);       // shared, vector loads, restrict
  CHECK(cuda.at("compute") == 3);      // unroll, fma, intrinsics
  CHECK(cuda.at("parallelism") == 3);  // thread indexing, grid-stride, warps, launch bounds (capped)
  auto omp = static_levels(kParallel);
  CHECK(omp.at("parallelism") == 1);
  CHECK(omp.at("memory") == 0);

  CHECK(register_bucket(-1) == 0);
  CHECK(register_bucket(40) == 1);
  CHECK(register_bucket(255) == 3);
  CHECK(shared_bytes_bucket(0) == 0);
  CHECK(shared_bytes_bucket(8192) == 1);
  CHECK(shared_bytes_bucket(48 * 1024) == 2);
  CHECK(shared_bytes_bucket(100000) == 3);
  CHECK(cell_key({"memory", "registers"}, coordinates({"memory", "registers"}, kVector, 100, -1)) ==
        "memory=2,registers=2");
}

TEST_CASE("complexity counts code lines and diversity the distance to the archive", "[archive][map_elites]") {
  CHECK(code_lines("") == 0);
  CHECK(code_lines(kPlain) == 1);
  CHECK(code_lines(kParallel) == 3);
  // Comments, blank lines and a comment-only line do not count; a line with code and a comment does.
  CHECK(code_lines("// header\n\n  /* a\n block */\nint x;  // x\n   \nint y;") == 2);

  CHECK(behaviour_diversity({1, 2}, {}) == 0);
  CHECK(behaviour_diversity({1, 2}, {{1, 2}, {1, 2}}) == 0);
  CHECK(behaviour_diversity({0, 0}, {{3, 3}}) == Approx(1.0));
  // Distances 2 and 0 over two programs, of at most 2 dimensions x 3 levels.
  CHECK(behaviour_diversity({1, 1}, {{2, 2}, {1, 1}}) == Approx(1.0 / 6.0));

  MapElitesArchive a(static_dims());
  proto::Program plain = program("p0", kPlain, 5.0);
  CHECK(a.diversity_of(plain) == 0);  // nothing to compare with
  a.add(plain);
  CHECK(a.diversity_of(plain) == 0);  // itself aside
  proto::Program parallel = program("p1", kParallel, 6.0);
  CHECK(a.coordinates_of(parallel) == std::vector<int64_t>{0, 0, 1});
  CHECK(a.diversity_of(parallel) == Approx(1.0 / 9.0));  // one level away on one of three dimensions
  a.add(parallel);
  proto::Program vector = program("p2", kVector, 7.0);  // memory 2 (vector loads, restrict)
  CHECK(a.diversity_of(vector) == Approx((2.0 / 9.0 + 3.0 / 9.0) / 2.0));

  // The plain archive has no grid: it compares on the default dimensions.
  EliteArchive elites;
  elites.add(plain);
  CHECK(elites.coordinates_of(vector).size() == default_dimensions().size());
  CHECK(elites.diversity_of(vector) == Approx(2.0 / 15.0));
}

TEST_CASE("each cell keeps its best program", "[archive][map_elites]") {
  MapElitesArchive a(static_dims());
  CHECK(a.add(program("p1", kPlain, 6.0)));
  CHECK(a.add(program("p2", kParallel, 5.5)));
  CHECK(a.add(program("p3", kVector, 5.2)));
  CHECK(a.cells_filled() == 3);
  CHECK(a.cell_of(program("x", kParallel, 0)) == "memory=0,compute=0,parallelism=1");
  CHECK_FALSE(a.add(program("p4", kPlain + "// worse\n", 5.9)));  // same cell, lower score
  CHECK(a.add(program("p5", kPlain + "// better\n", 6.5)));
  CHECK(a.cells_filled() == 3);
  CHECK(a.size() == 3);
  CHECK(a.at(0, "memory=0,compute=0,parallelism=0")->id == "p5");
  CHECK(a.best()->id == "p5");
  auto elites = a.elites();
  REQUIRE(elites.size() == 3);
  CHECK(elites[0].id == "p5");
  CHECK(elites[2].id == "p3");

  proto::Program no_code = program("p6", "", 0);
  no_code.eval.perf_score = 0;
  CHECK_FALSE(a.add(no_code));  // nothing to start from
}

TEST_CASE("islands exchange their best along a ring every N additions", "[archive][map_elites]") {
  MapElitesArchive a(static_dims(3, 2));
  proto::Program p0 = program("p0", kPlain, 5.1);
  p0.is_program0 = true;
  a.add(p0);  // program 0 seeds every island (addition 1)
  for (int i = 0; i < 3; ++i) CHECK(a.island_cells(i).size() == 1);
  CHECK(a.migrations() == 0);
  a.add(program("p1", kParallel, 7.0, 0));  // addition 2: migration
  CHECK(a.migrations() == 1);
  // Island 0's best (p1) moved to island 1, not further; island 2 got island 1's best (p0, already there).
  CHECK(a.at(1, "memory=0,compute=0,parallelism=1") != nullptr);
  CHECK(a.at(2, "memory=0,compute=0,parallelism=1") == nullptr);
  a.add(program("p2", kVector, 5.0, 2));
  a.add(program("p3", kVector + "//\n", 5.05, 2));  // addition 4: second migration
  CHECK(a.migrations() == 2);
  CHECK(a.at(2, "memory=0,compute=0,parallelism=1")->id == "p1");  // one step further round the ring
}

TEST_CASE("parents follow the exploration / exploitation / random ratios", "[archive][map_elites]") {
  MapElitesArchive a(static_dims(2));
  proto::Program p0 = program("p0", kPlain, 5.1);
  p0.is_program0 = true;
  a.add(p0);
  a.add(program("p1", kParallel, 7.0, 0));
  a.add(program("p2", kVector, 6.0, 0));
  a.add(program("p3", kVector, 8.0, 1));

  Rng rng(seed_from("ratios"));
  std::map<std::string, int> modes;
  int best_parent = 0;
  constexpr int kDraws = 20000;
  for (int i = 0; i < kDraws; ++i) {
    Selection s = a.select(rng, 0);
    REQUIRE(s.parent);
    ++modes[s.mode];
    if (s.mode == "exploitation") best_parent += s.parent->id == "p1";  // island 0's best
    REQUIRE(s.inspirations.size() == 2);
    std::set<std::string> ids{s.parent->id};
    for (const auto& insp : s.inspirations) {
      CHECK(ids.insert(insp.id).second);        // distinct, never the parent
      CHECK(a.cell_of(insp) != s.parent_cell);  // from other cells
    }
  }
  CHECK(modes["exploration"] == Approx(0.2 * kDraws).epsilon(0.05));
  CHECK(modes["exploitation"] == Approx(0.7 * kDraws).epsilon(0.05));
  CHECK(modes["random"] == Approx(0.1 * kDraws).epsilon(0.1));
  CHECK(best_parent == modes["exploitation"]);

  // The same seed gives the same choices.
  Rng r1(7), r2(7);
  CHECK(a.select(r1, 1).parent->id == a.select(r2, 1).parent->id);

  // The target is an empty neighbour of the parent's cell (one static level away) on its island.
  Rng r3(11);
  for (int i = 0; i < 50; ++i) {
    Selection s = a.select(r3, 0);
    CHECK(s.target_cell != s.parent_cell);
    CHECK(a.at(0, s.target_cell) == nullptr);
  }
}
