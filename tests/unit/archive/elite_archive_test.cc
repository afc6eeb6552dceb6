#include <catch2/catch.hpp>

#include <set>

#include "kiln/archive/archive.h"

using namespace kiln;

namespace {
proto::Program program(const std::string& id, double score) {
  proto::Program p;
  p.id = id;
  p.eval.combined_score = score;
  return p;
}
}  // namespace

TEST_CASE("the elite archive keeps the top k, ties to the first offered", "[archive]") {
  archive::EliteArchive a({3, 0.7});
  CHECK_FALSE(a.best());
  CHECK(a.add(program("p0", 5.0)));
  CHECK(a.add(program("p1", 6.5)));
  CHECK(a.add(program("p2", 5.0)));        // ties p0, offered later
  CHECK_FALSE(a.add(program("p3", 4.0)));  // below all three: not kept
  CHECK(a.add(program("p4", 7.0)));        // pushes out the last of the tie
  REQUIRE(a.size() == 3);
  auto elites = a.elites();
  CHECK(elites[0].id == "p4");
  CHECK(elites[1].id == "p1");
  CHECK(elites[2].id == "p0");
  CHECK(a.best()->id == "p4");

  SECTION("offering an id again replaces it") {
    CHECK(a.add(program("p1", 1.0)));  // still room for it, now last
    CHECK(a.size() == 3);
    CHECK(a.elites().back().id == "p1");
    CHECK(a.add(program("p4", 7.5)));
    CHECK(a.best()->id == "p4");
    CHECK(a.best()->eval.combined_score == 7.5);
  }
}

TEST_CASE("parent selection is seeded and favours the best", "[archive]") {
  archive::EliteArchive a({8, 0.7});
  Rng empty_rng(1);
  CHECK_FALSE(a.select_parent(empty_rng));
  for (int i = 0; i < 8; ++i) a.add(program("p" + std::to_string(i), 5.0 + i));

  // Same seed, same choices.
  for (uint64_t seed : {uint64_t{1}, uint64_t{42}, seed_from("camp#3")}) {
    Rng r1(seed), r2(seed);
    CHECK(a.select_parent(r1)->id == a.select_parent(r2)->id);
  }
  CHECK(seed_from("camp#3") == seed_from("camp#3"));
  CHECK(seed_from("camp#3") != seed_from("camp#4"));

  // About 70 % best plus an eighth of the rest; every elite comes up.
  Rng rng(7);
  int best = 0;
  std::set<std::string> seen;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    auto p = a.select_parent(rng);
    seen.insert(p->id);
    best += p->id == "p7";
  }
  const double expected = 0.7 + 0.3 / 8;
  CHECK(static_cast<double>(best) / n == Approx(expected).margin(0.03));
  CHECK(seen.size() == 8);
}

TEST_CASE("the rng stays in range and is uniform enough", "[archive]") {
  Rng rng(123);
  std::vector<int> counts(5);
  for (int i = 0; i < 5000; ++i) {
    uint64_t v = rng.below(5);
    REQUIRE(v < 5);
    ++counts[v];
    double u = rng.uniform();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
  }
  for (int c : counts) CHECK(c == Approx(1000).margin(120));
}
