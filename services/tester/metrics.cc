#include "kiln/tester/metrics.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::tester {
namespace {

// The status label values of kiln_tester_evaluations_total: every verdict, "error" for an evaluation
// given back (evaluator_error among them), "other" for a report without a verdict, so the series stay a
// fixed set.
constexpr std::array kVerdicts = {
    proto::TestStatus::kOk,         proto::TestStatus::kMismatch,  proto::TestStatus::kInputModified,
    proto::TestStatus::kWrongShape, proto::TestStatus::kNonFinite, proto::TestStatus::kCrashed,
    proto::TestStatus::kTimedOut,   proto::TestStatus::kLoadFailed};
constexpr std::string_view kErrorLabel = "error";
constexpr std::string_view kOtherLabel = "other";

std::string_view status_label(const Result<proto::TestReport>& report) {
  if (!report.is_ok()) return kErrorLabel;
  const std::optional<proto::TestStatus>& status = report->status;
  if (!status || std::find(kVerdicts.begin(), kVerdicts.end(), *status) == kVerdicts.end()) return kOtherLabel;
  return proto::name(*status);
}

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
  for (proto::TestStatus s : kVerdicts)
    evaluations_->Add({{"device", device_}, {"status", std::string(proto::name(s))}});
  for (std::string_view s : {kErrorLabel, kOtherLabel})
    evaluations_->Add({{"device", device_}, {"status", std::string(s)}});
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
  evaluations_->Add({{"device", device_}, {"status", std::string(status_label(report))}}).Increment();
}

}  // namespace kiln::tester
