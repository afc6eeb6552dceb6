// Host tensors: large fills, copies and comparisons are spread over threads and must give what one pass
// from the start gives, to the bit and in the same order.
#include "kiln/eval/tensor.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

using kiln::eval::Comparison;
using kiln::eval::HostTensor;
using kiln::eval::SplitMix64;
using kiln::task::DType;
using kiln::task::InitKind;

namespace {

// Larger than what stays on one thread, and odd, so that pieces end anywhere.
constexpr int64_t kLarge = (int64_t{3} << 20) + 7;

// The fill as one sequential pass of the generator.
HostTensor sequential_fill(DType dtype, int64_t n, InitKind init, double a, double b, uint64_t seed) {
  HostTensor t(dtype, {n});
  SplitMix64 rng(seed);
  for (int64_t i = 0; i < n; ++i) {
    double v = 0;
    switch (init) {
      case InitKind::kNormal: {
        const auto [x, y] = kiln::eval::normal_pair(seed, static_cast<uint64_t>(i / 2));
        v = i % 2 == 0 ? x : y;
        break;
      }
      case InitKind::kUniform: v = a + (b - a) * rng.uniform01(); break;
      case InitKind::kInt: v = std::floor(a + (b - a + 1) * rng.uniform01()); break;
      default: break;
    }
    t.set(static_cast<size_t>(i), v);
  }
  return t;
}

}  // namespace

TEST_CASE("a large fill is the same, to the bit, as one pass of the generator", "[eval][tensor]") {
  INFO("threads: " << kiln::eval::fill_threads());
  for (DType dtype : {DType::kF32, DType::kF64, DType::kF16}) {
    for (InitKind init : {InitKind::kNormal, InitKind::kUniform, InitKind::kInt}) {
      HostTensor t(dtype, {kLarge});
      t.fill(init, -3, 5, 42);
      CHECK(t.same_bytes(sequential_fill(dtype, kLarge, init, -3, 5, 42)));
    }
  }
  // Small tensors too (one piece).
  HostTensor small(DType::kF32, {5});
  small.fill(InitKind::kNormal, 0, 1, 9);
  CHECK(small.same_bytes(sequential_fill(DType::kF32, 5, InitKind::kNormal, 0, 1, 9)));
}

TEST_CASE("normal fills are standard normal", "[eval][tensor]") {
  HostTensor t(DType::kF64, {1 << 20});
  t.fill(InitKind::kNormal, 0, 1, 5);
  double sum = 0, squares = 0;
  size_t within_one = 0, beyond_three = 0, nonfinite = 0;
  for (size_t i = 0; i < t.elements(); ++i) {
    const double v = t.get(i);
    nonfinite += std::isfinite(v) ? 0 : 1;
    sum += v;
    squares += v * v;
    within_one += std::fabs(v) < 1 ? 1 : 0;
    beyond_three += std::fabs(v) > 3 ? 1 : 0;
  }
  const double n = static_cast<double>(t.elements());
  CHECK(nonfinite == 0);
  CHECK(std::fabs(sum / n) < 0.005);
  CHECK(std::fabs(squares / n - 1) < 0.01);
  CHECK(std::fabs(within_one / n - 0.6827) < 0.003);
  CHECK(std::fabs(beyond_three / n - 0.0027) < 0.0005);
  // Another seed gives other values; the same seed the same.
  HostTensor same(DType::kF64, {1 << 20}), other(DType::kF64, {1 << 20});
  same.fill(InitKind::kNormal, 0, 1, 5);
  other.fill(InitKind::kNormal, 0, 1, 6);
  CHECK(same.same_bytes(t));
  CHECK_FALSE(other.same_bytes(t));
}

TEST_CASE("skipping draws positions the generator where the draws would have left it", "[eval][tensor]") {
  SplitMix64 a(7), b(7);
  for (int i = 0; i < 1001; ++i) a.next();
  b.skip(1001);
  CHECK(a.next() == b.next());
}

TEST_CASE("a large copy and a poisoning are exact", "[eval][tensor]") {
  HostTensor a(DType::kF32, {kLarge});
  a.fill(InitKind::kNormal, 0, 1, 3);
  HostTensor b = a;
  CHECK(b.same_bytes(a));
  b.poison(0);
  const float* f = static_cast<const float*>(b.data());
  CHECK(std::isnan(f[0]));
  CHECK(std::isnan(f[kLarge - 1]));
  b.copy_from(a);
  CHECK(b.same_bytes(a));
}

TEST_CASE("a large comparison finds every difference and lists the first ones in order", "[eval][tensor]") {
  HostTensor expected(DType::kF32, {kLarge});
  expected.fill(InitKind::kNormal, 0, 1, 11);
  HostTensor got = expected;
  float* g = static_cast<float*>(got.data());
  const float* e = static_cast<const float*>(expected.data());
  // Differences spread over the whole tensor (so over every piece): off by 1, one NaN, one Inf.
  const size_t off[] = {3, 1u << 20, (1u << 20) + 1, 2u << 20, static_cast<size_t>(kLarge - 1)};
  for (size_t i : off) g[i] += 1.0f;
  g[5] = std::numeric_limits<float>::quiet_NaN();
  g[(3u << 20) - 9] = std::numeric_limits<float>::infinity();

  Comparison c;
  kiln::eval::compare(got, expected, 1e-5, 1e-5, "y", "ctx", 3, c);
  CHECK(c.mismatches == 7);
  CHECK(c.nonfinite == 2);
  CHECK(c.max_abs_error == Approx(1.0).epsilon(1e-3));
  REQUIRE(c.first_mismatches.size() == 3);
  CHECK(c.first_mismatches[0].rfind("y[3]: got ", 0) == 0);
  CHECK(c.first_mismatches[1].rfind("y[5]: got nan", 0) == 0);
  CHECK(c.first_mismatches[2].rfind("y[1048576]: got ", 0) == 0);

  // Against a generic pass over the same values (fp64 tensors take the generic path).
  HostTensor got64(DType::kF64, {kLarge}), expected64(DType::kF64, {kLarge});
  for (int64_t i = 0; i < kLarge; ++i) {
    got64.set(static_cast<size_t>(i), g[i]);
    expected64.set(static_cast<size_t>(i), e[i]);
  }
  Comparison generic;
  kiln::eval::compare(got64, expected64, 1e-5, 1e-5, "y", "ctx", 3, generic);
  CHECK(generic.mismatches == c.mismatches);
  CHECK(generic.nonfinite == c.nonfinite);
  CHECK(generic.max_abs_error == c.max_abs_error);
  CHECK(generic.max_rel_error == c.max_rel_error);
  CHECK(generic.first_mismatches == c.first_mismatches);

  // A comparison that adds to earlier findings lists only up to the bound in all.
  Comparison more;
  more.first_mismatches = {"a", "b"};
  kiln::eval::compare(got, expected, 1e-5, 1e-5, "y", "ctx", 3, more);
  REQUIRE(more.first_mismatches.size() == 3);
  CHECK(more.first_mismatches[2].rfind("y[3]: ", 0) == 0);
  CHECK(more.mismatches == 7);
}
