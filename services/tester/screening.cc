#include "kiln/tester/screening.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::tester {

double SeenBars::bar(const std::string& campaign) {
  std::lock_guard lock(mu_);
  auto it = bars_.find(campaign);
  if (it == bars_.end()) return 0;
  it->second.used = ++clock_;
  return it->second.bar;
}

void SeenBars::record(const std::string& campaign, const proto::TestReport& report) {
  if (campaign.empty() || report.status != proto::TestStatus::kOk || !report.performance.measured ||
      report.performance.cases.empty())
    return;
  double lowest = std::numeric_limits<double>::infinity();
  for (const auto& c : report.performance.cases) {
    if (c.stop_reason == proto::stop_reason::kScreened || !std::isfinite(c.speedup_lo)) return;
    lowest = std::min(lowest, c.speedup_lo);
  }
  if (!(lowest > 0)) return;
  std::lock_guard lock(mu_);
  Entry& e = bars_[campaign];
  e.bar = std::max(e.bar, lowest);
  e.used = ++clock_;
  if (bars_.size() > max_campaigns_) {
    auto oldest = std::min_element(bars_.begin(), bars_.end(),
                                   [](const auto& a, const auto& b) { return a.second.used < b.second.used; });
    bars_.erase(oldest);
  }
}

size_t SeenBars::size() const {
  std::lock_guard lock(mu_);
  return bars_.size();
}

ScreenBar screen_bar(double tester_bar, double requested, double seen, bool confirmation) {
  if (confirmation) return {};
  // The bar the request carries came through the scorer's store; the same kernel's bound measured here may
  // differ from it in the last digits. Only a bar clearly above it is this tester's own.
  const bool fresher = seen > requested * (1 + 1e-6);
  ScreenBar bar;
  bar.below = std::max({tester_bar, requested, fresher ? seen : 0.0});
  if (bar.below > 0) {
    bar.by = bar.below == tester_bar  ? "tester"
             : bar.below == requested ? "campaign best"
                                      : "campaign best measured here";
  }
  return bar;
}

}  // namespace kiln::tester
