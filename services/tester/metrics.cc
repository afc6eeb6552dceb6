#include "kiln/tester/metrics.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace kiln::tester {
namespace {

// The status label values of kiln_tester_evaluations_total: every test_status, "error" for an evaluation
// given back, "other" for anything else, so the series stay a fixed set.
constexpr std::array<std::string_view, 10> kCountedStatuses = {proto::test_status::kOk,
                                                               proto::test_status::kMismatch,
                                                               proto::test_status::kInputModified,
                                                               proto::test_status::kWrongShape,
                                                               proto::test_status::kNonFinite,
                                                               proto::test_status::kCrashed,
                                                               proto::test_status::kTimedOut,
                                                               proto::test_status::kLoadFailed,
                                                               "error",
                                                               "other"};

}  // namespace

void TesterMetrics::start(prometheus::Registry& registry, const std::string& device) {
  device_ = device;
  evaluations_ = &prometheus::BuildCounter()
                      .Name("kiln_tester_evaluations_total")
                      .Help(
                          "Evaluations by this tester, by device and status (error: given back or dead-lettered, "
                          "not scored)")
                      .Register(registry);
  // Every status at zero from the start, so rates exist before the first of each kind.
  for (std::string_view s : kCountedStatuses) evaluations_->Add({{"device", device_}, {"status", std::string(s)}});
  busy_seconds_ = &prometheus::BuildCounter()
                       .Name("kiln_tester_busy_seconds_total")
                       .Help("Wall time spent evaluating (correctness, timing, profiling), by device")
                       .Register(registry)
                       .Add({{"device", device_}});
  timing_seconds_ = &prometheus::BuildCounter()
                         .Name("kiln_tester_timing_seconds_total")
                         .Help(
                             "Wall time of timing rounds (the device busy with a candidate and its reference, "
                             "nothing else), by device: its rate over kiln_tester_busy_seconds_total's is the "
                             "share of evaluation time spent measuring")
                         .Register(registry)
                         .Add({{"device", device_}});
}

void TesterMetrics::count(const Result<proto::TestReport>& report, double busy_s) {
  if (evaluations_ == nullptr) return;
  busy_seconds_->Increment(busy_s);
  if (report.is_ok())
    for (const proto::CaseTiming& c : report->performance.cases) timing_seconds_->Increment(std::max(c.timing_s, 0.0));
  std::string status = report.is_ok() ? report->status : "error";
  if (std::find(kCountedStatuses.begin(), kCountedStatuses.end(), status) == kCountedStatuses.end()) status = "other";
  evaluations_->Add({{"device", device_}, {"status", status}}).Increment();
}

}  // namespace kiln::tester
