#include "kiln/eval/stats.h"

#include <catch2/catch.hpp>

#include "kiln/eval/host.h"

using kiln::eval::bootstrap_speedup;
using kiln::eval::compute_stats;

TEST_CASE("stats of a known series", "[eval]") {
  std::vector<double> xs = {10, 1, 9, 2, 8, 3, 7, 4, 6, 5};
  auto s = compute_stats(xs);
  CHECK(s.n == 10);
  CHECK(s.median_us == Approx(5.5));
  CHECK(s.mean_us == Approx(5.5));
  CHECK(s.min_us == 1);
  CHECK(s.max_us == 10);
  CHECK(s.p10_us == Approx(1.9));
  CHECK(s.p90_us == Approx(9.1));
  CHECK(s.stdev_us == Approx(3.02765).epsilon(1e-4));
  CHECK(s.cv == Approx(3.02765 / 5.5).epsilon(1e-4));
  CHECK(compute_stats({}).n == 0);
}

TEST_CASE("the bootstrap interval is reproducible and brackets the ratio", "[eval]") {
  std::vector<double> ref, cand;
  for (int i = 0; i < 500; ++i) {
    double jitter = (i * 37 % 11) * 0.01;
    ref.push_back(2.0 + jitter);
    cand.push_back(1.0 + jitter / 2);
  }
  auto a = bootstrap_speedup(ref, cand, 7);
  auto b = bootstrap_speedup(ref, cand, 7);
  CHECK(a.lo == b.lo);
  CHECK(a.hi == b.hi);
  CHECK(a.lo <= 2.0);
  CHECK(a.hi >= 2.0);
  CHECK(a.lo > 1.8);
  CHECK(a.hi < 2.2);

  auto same = bootstrap_speedup({3, 3, 3}, {3, 3, 3}, 1);
  CHECK(same.lo == 1);
  CHECK(same.hi == 1);
  CHECK(bootstrap_speedup({}, {}, 1).lo == 0);
}

TEST_CASE("running noise matches the batch statistics", "[eval]") {
  kiln::eval::RunningStats r;
  std::vector<double> xs = {4, 5, 6, 5, 4, 6};
  for (double x : xs) r.add(x);
  CHECK(r.n() == 6);
  CHECK(r.cv() == Approx(compute_stats(xs).cv));
}

TEST_CASE("the host is described", "[eval]") {
  auto w = kiln::eval::cpu_worker_info();
  CHECK(w.backend == kiln::proto::Backend::kCpu);
  CHECK_FALSE(w.device_name.empty());
  CHECK_FALSE(w.host.empty());
  CHECK(kiln::eval::last_level_cache_bytes() >= (256u << 10));
}

TEST_CASE("the block bootstrap widens the interval when whole blocks are offset", "[eval][stats]") {
  // 20 blocks of 8 pairs; the candidate runs 3 % fast or slow for a whole block (placement), with little
  // noise inside a block. Resampling pairs treats the 160 pairs as independent; resampling blocks sees 20.
  std::vector<double> ref, cand;
  for (int b = 0; b < 20; ++b) {
    const double offset = (b * 7 % 5 - 2) * 0.015;
    for (int i = 0; i < 8; ++i) {
      ref.push_back(100.0 + 0.01 * i);
      cand.push_back(100.0 * (1.0 + offset) + 0.01 * i);
    }
  }
  auto pairs = kiln::eval::bootstrap_speedup(ref, cand, 7);
  std::vector<size_t> starts;
  for (size_t b = 0; b < 20; ++b) starts.push_back(8 * b);
  auto blocks = kiln::eval::bootstrap_speedup(ref, cand, 7, 2000, starts);
  CHECK(blocks.lo <= pairs.lo);
  CHECK(blocks.hi >= pairs.hi);
  CHECK(blocks.hi - blocks.lo > pairs.hi - pairs.lo);
  // Still deterministic.
  auto again = kiln::eval::bootstrap_speedup(ref, cand, 7, 2000, starts);
  CHECK(again.lo == blocks.lo);
  CHECK(again.hi == blocks.hi);
}
