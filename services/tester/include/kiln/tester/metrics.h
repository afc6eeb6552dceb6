// The tester's counters on /metrics, per device: kiln_tester_evaluations_total{device, status} (every
// evaluation, by its status; "error" when it was given back or dead-lettered),
// kiln_tester_timing_seconds_total{device} (wall time of the timing rounds the reports say) and
// kiln_tester_busy_seconds_total{device} (wall time spent evaluating: its rate is the fraction of time this
// tester's device is busy with Kiln).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include <string>

#include "kiln/core/status.h"
#include "kiln/proto/payloads.h"

namespace kiln::tester {

class TesterMetrics {
 public:
  // Registers the counters on `registry` for `device`, every status at zero.
  void start(prometheus::Registry& registry, const std::string& device);
  // One evaluation that took `busy_s` and ended with `report` (nothing before start()).
  void count(const Result<proto::TestReport>& report, double busy_s);

 private:
  std::string device_;
  prometheus::Family<prometheus::Counter>* evaluations_ = nullptr;
  prometheus::Counter* busy_seconds_ = nullptr;
  prometheus::Counter* timing_seconds_ = nullptr;
};

}  // namespace kiln::tester
