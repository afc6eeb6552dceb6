// Sample statistics for timing results.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/proto/payloads.h"

namespace kiln::eval {

// Median, mean, sample stdev, CV, p10/p90 (linear interpolation between ranks), min, max, n.
proto::Stats compute_stats(const std::vector<double>& samples_us);

// Value at quantile q in [0,1] of sorted data, interpolating linearly between ranks.
double quantile_sorted(const std::vector<double>& sorted, double q);

struct SpeedupInterval {
  double lo = 0;
  double hi = 0;
};

// `confidence` (95 %) interval of median(reference) / median(candidate) by a bootstrap over the paired
// samples (sample i of both was taken back to back): resample with a PRNG seeded by `seed`, take the ratio
// of medians, report the (1 - confidence) / 2 and (1 + confidence) / 2 quantiles. With `block_starts` (the first pair
// of each block, ascending, starting at 0) whole blocks are resampled, so what stays the same within a block (the
// processes, placement, drift) is part of the spread; with fewer than 4 blocks, single pairs are
// resampled. Deterministic for the same inputs.
SpeedupInterval bootstrap_speedup(const std::vector<double>& reference_us, const std::vector<double>& candidate_us,
                                  uint64_t seed, int resamples = 2000, const std::vector<size_t>& block_starts = {},
                                  double confidence = 0.95);

// Running mean and variance (Welford), for checking the noise while sampling.
class RunningStats {
 public:
  void add(double x);
  int64_t n() const { return n_; }
  double mean() const { return mean_; }
  double cv() const;  // sample stdev / mean; 0 with fewer than two samples

 private:
  int64_t n_ = 0;
  double mean_ = 0;
  double m2_ = 0;
};

}  // namespace kiln::eval
