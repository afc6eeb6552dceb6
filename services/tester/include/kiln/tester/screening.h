// Screening a first measurement: the bar a candidate's interval must be able to reach on every case, from
// the campaign's best as the request carries it and as this tester has measured it since.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "kiln/proto/payloads.h"

namespace kiln::tester {

// Per campaign, the screening bar this tester has learned from its own reports: the highest lowest-per-case
// lower bound of a correct first measurement it made in full (no case screened). The same quantity as the
// scorer's bar (the campaign best's min_speedup_lo) for the best this tester has seen, so the same argument
// holds: a candidate whose interval ends below it on a case cannot overtake that kernel. Thread-safe; keeps
// the `max_campaigns` most recently used campaigns.
class SeenBars {
 public:
  explicit SeenBars(size_t max_campaigns = 1024) : max_campaigns_(max_campaigns) {}
  // The bar for `campaign`, 0 when none was learned.
  double bar(const std::string& campaign);
  // Learns from a first measurement's report (confirmations and reports of other kinds teach nothing).
  void record(const std::string& campaign, const proto::TestReport& report);
  size_t size() const;

 private:
  struct Entry {
    double bar = 0;
    uint64_t used = 0;
  };
  mutable std::mutex mu_;
  std::map<std::string, Entry> bars_;
  uint64_t clock_ = 0;
  size_t max_campaigns_;
};

// The bar a measurement is screened against (0: none) and whose bar it is, as TestReport.metadata's
// timing_screen_by says: "tester" (tester.timing.screen_below), "campaign best" (the request's: the
// campaign's best when the candidate was proposed) or "campaign best measured here" (`seen`, this tester's
// SeenBars, when clearly above the request's). A confirmation is measured in full: no bar.
struct ScreenBar {
  double below = 0;
  std::string by;
};
ScreenBar screen_bar(double tester_bar, double requested, double seen, bool confirmation);

}  // namespace kiln::tester
