// The log lines of one timed case (case_log.h).
#include "case_log.h"

#include <cstdio>

namespace kiln::eval::detail {
namespace {

constexpr size_t kCandidate = 0;
constexpr size_t kReference = 1;
// The log lists the candidate's median and placement for this many blocks at most.
constexpr size_t kLoggedBlocks = 40;

}  // namespace

void log_widening(const Device& device, const std::string& shape, const Allowance& cand, const Allowance& ref,
                  double samples_lo, double samples_hi) {
  if (cand.slower_us > 0 || cand.faster_us > 0 || ref.slower_us > 0 || ref.faster_us > 0) {
    std::fprintf(stderr,
                 "%s: %s: interval widened for reproducibility and placement by +%.2f/-%.2f us (candidate), "
                 "+%.2f/-%.2f us (reference), from the samples' own [%.4f, %.4f]\n",
                 device.log_prefix(), shape.c_str(), cand.slower_us, cand.faster_us, ref.slower_us, ref.faster_us,
                 samples_lo, samples_hi);
  }
}

void log_case_spread(const Device& device, const std::string& shape, const proto::CaseTiming& timing,
                     const std::vector<std::vector<double>>& samples, const std::vector<size_t>& block_starts,
                     const Placements& placements) {
  // Which side moved, when two measurements of one kernel disagree, and whether its samples have one mode
  // or two (a wide p10..p90 moves the median with the share of slow samples; bench/throughput/remeasure.sh).
  const auto& c = timing.candidate;
  const auto& r = timing.reference;
  const OrderMedians order = candidate_medians_by_order(samples[kCandidate]);
  const BlockRange blocks_range = block_median_range(samples[kCandidate], block_starts);
  std::fprintf(stderr,
               "%s: %s: medians: candidate %.3f us, reference %.3f us; p10..p90: candidate %.3f..%.3f us (cv %.3f), "
               "reference %.3f..%.3f us (cv %.3f); candidate right after the reference %.3f us, after itself %.3f "
               "us; candidate's block medians %.3f..%.3f us\n",
               device.log_prefix(), shape.c_str(), c.median_us, r.median_us, c.p10_us, c.p90_us, c.cv, r.p10_us,
               r.p90_us, r.cv, order.after_reference_us, order.after_itself_us, blocks_range.lo_us, blocks_range.hi_us);
  // Each block's median and where the tensors sat, for the candidate and the reference: a kernel whose
  // speed depends on where its tensors land shows it here as two groups of blocks, and an A/A offset
  // shows which side it is on.
  for (size_t who : {kCandidate, kReference}) {
    std::string per_block;
    const std::vector<double> medians = block_medians(samples[who], block_starts);
    const bool paired = medians.size() == placements[who].size();  // no block without samples was left out
    for (size_t b = 0; b < medians.size() && b < kLoggedBlocks; ++b) {
      char one[96];
      const std::string& at = paired ? placements[who][b] : std::string();
      std::snprintf(one, sizeof one, "%s%.1f%s%s%s", b == 0 ? "" : ", ", medians[b], at.empty() ? "" : " (", at.c_str(),
                    at.empty() ? "" : ")");
      per_block += one;
    }
    if (medians.size() > kLoggedBlocks) per_block += ", ...";
    std::fprintf(stderr, "%s: %s: %s's blocks (median us): %s\n", device.log_prefix(), shape.c_str(),
                 device.name(who).c_str(), per_block.c_str());
  }
}

}  // namespace kiln::eval::detail
