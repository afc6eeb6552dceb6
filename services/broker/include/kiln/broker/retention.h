// Retention of ended jobs (job_table.h RetentionOptions): a pass every interval deletes what is past the
// age or count limits, a batch at a time, and gives the pages back to the file system, so a broker that
// runs for months keeps a job table of bounded size. Time comes from the caller, so tests drive it.
#pragma once

#include <cstdint>

#include "kiln/broker/job_table.h"
#include "kiln/broker/metrics.h"
#include "kiln/core/status.h"

namespace kiln::broker {

class TableRetention {
 public:
  // `table` and `metrics` must outlive it. interval_s 0: tick() never prunes.
  TableRetention(JobTable& table, RetentionOptions options, double interval_s, BrokerMetrics& metrics)
      : table_(table), opt_(options), interval_s_(interval_s), metrics_(metrics) {}

  // One pass when one is due at `now_mono` (monotonic): ages are read against `now_wall`. A pass that
  // deleted a whole batch makes the next one due at once, so a backlog drains a batch per tick.
  void tick(double now_mono, double now_wall);
  // One pass now: the rows deleted.
  Result<int64_t> prune(double now_wall);

 private:
  JobTable& table_;
  RetentionOptions opt_;
  double interval_s_;
  BrokerMetrics& metrics_;
  double next_mono_ = 0;
};

}  // namespace kiln::broker
