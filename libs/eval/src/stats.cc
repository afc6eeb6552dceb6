#include "kiln/eval/stats.h"

#include <algorithm>
#include <cmath>

#include "kiln/eval/tensor.h"

namespace kiln::eval {
namespace {

// Bootstrapping more pairs than this adds run time, not precision: beyond it, evenly spaced pairs
// stand in for the whole series.
constexpr size_t kMaxBootstrapPairs = 2000;

double median_of(std::vector<double>& v) {
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  double lo = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lo + hi);
}

}  // namespace

double quantile_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

proto::Stats compute_stats(const std::vector<double>& samples_us) {
  proto::Stats s;
  if (samples_us.empty()) return s;
  std::vector<double> sorted = samples_us;
  std::sort(sorted.begin(), sorted.end());
  RunningStats running;
  for (double x : sorted) running.add(x);
  s.n = static_cast<int64_t>(sorted.size());
  s.median_us = quantile_sorted(sorted, 0.5);
  s.mean_us = running.mean();
  s.cv = running.cv();
  s.stdev_us = s.cv * running.mean();
  s.p10_us = quantile_sorted(sorted, 0.10);
  s.p90_us = quantile_sorted(sorted, 0.90);
  s.min_us = sorted.front();
  s.max_us = sorted.back();
  return s;
}

SpeedupInterval bootstrap_speedup(const std::vector<double>& reference_us, const std::vector<double>& candidate_us,
                                  uint64_t seed, int resamples, const std::vector<size_t>& block_starts,
                                  double confidence) {
  const size_t total = std::min(reference_us.size(), candidate_us.size());
  if (total == 0 || resamples <= 0) return {};
  std::vector<double> ref, cand;
  const size_t n = std::min(total, kMaxBootstrapPairs);
  for (size_t i = 0; i < n; ++i) {
    size_t j = i * total / n;
    ref.push_back(reference_us[j]);
    cand.push_back(candidate_us[j]);
  }
  // Blocks as [begin, end) in the thinned series; every pair is a block of its own without them.
  // Fewer than kMinBlocks blocks say nothing about the spread between them: single pairs then.
  constexpr size_t kMinBlocks = 4;
  std::vector<std::pair<size_t, size_t>> blocks;
  if (block_starts.size() < kMinBlocks) {
    for (size_t i = 0; i < n; ++i) blocks.emplace_back(i, i + 1);
  } else {
    std::vector<size_t> starts;
    for (size_t b : block_starts) {
      const size_t at = std::min(n, (b * n + total - 1) / total);
      if (starts.empty() || at > starts.back()) starts.push_back(at);
    }
    if (starts.front() != 0) starts.insert(starts.begin(), 0);
    for (size_t k = 0; k < starts.size(); ++k) {
      const size_t end = k + 1 < starts.size() ? starts[k + 1] : n;
      if (end > starts[k]) blocks.emplace_back(starts[k], end);
    }
  }
  SplitMix64 rng(seed);
  std::vector<double> ratios;
  ratios.reserve(static_cast<size_t>(resamples));
  std::vector<double> r, c;
  r.reserve(n);
  c.reserve(n);
  for (int b = 0; b < resamples; ++b) {
    r.clear();
    c.clear();
    while (r.size() < n) {
      const auto [begin, end] = blocks[static_cast<size_t>(rng.next() % blocks.size())];
      for (size_t k = begin; k < end && r.size() < n; ++k) {
        r.push_back(ref[k]);
        c.push_back(cand[k]);
      }
    }
    double cand_median = median_of(c);
    if (cand_median > 0) ratios.push_back(median_of(r) / cand_median);
  }
  if (ratios.empty()) return {};
  std::sort(ratios.begin(), ratios.end());
  const double tail = std::clamp((1 - confidence) / 2, 0.0, 0.5);
  return {quantile_sorted(ratios, tail), quantile_sorted(ratios, 1 - tail)};
}

void RunningStats::add(double x) {
  ++n_;
  double delta = x - mean_;
  mean_ += delta / static_cast<double>(n_);
  m2_ += delta * (x - mean_);
}

double RunningStats::cv() const {
  if (n_ < 2 || mean_ == 0) return 0;
  return std::sqrt(m2_ / static_cast<double>(n_ - 1)) / std::fabs(mean_);
}

}  // namespace kiln::eval
