#include "kiln/broker/retention.h"

#include <spdlog/spdlog.h>

namespace kiln::broker {

Result<int64_t> TableRetention::prune(double now_wall) {
  const double ended_before = opt_.finished_max_age_s > 0 ? now_wall - opt_.finished_max_age_s : 0;
  KILN_ASSIGN_OR_RETURN(int64_t deleted, table_.prune_finished(ended_before, opt_.finished_max_jobs, opt_.prune_batch));
  KILN_ASSIGN_OR_RETURN(TableStorage storage, table_.storage());
  metrics_.jobs_pruned(deleted);
  metrics_.set_table_bytes(storage.bytes());
  return deleted;
}

void TableRetention::tick(double now_mono, double now_wall) {
  if (interval_s_ <= 0 || now_mono < next_mono_) return;
  auto deleted = prune(now_wall);
  if (!deleted.is_ok()) {
    spdlog::warn("job table retention: {}", deleted.status().message());
    next_mono_ = now_mono + interval_s_;
    return;
  }
  if (*deleted > 0) spdlog::info("job table retention: {} ended job(s) deleted", *deleted);
  next_mono_ = *deleted >= opt_.prune_batch ? now_mono : now_mono + interval_s_;
}

}  // namespace kiln::broker
