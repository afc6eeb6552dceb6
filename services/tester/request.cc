#include "request.h"

#include <cmath>
#include <cstdio>
#include <utility>

#include "kiln/messaging/outcome.h"

namespace kiln::tester {

Result<TestJob> decode_test_job(const proto::TestRequest& request, service::TaskSource& tasks) {
  // Whose fault each failure is, for messaging::outcome_for: a task package that does not parse is the
  // job's, permanently; trouble fetching it here is this worker's. Neither is the candidate's: its own
  // failures are reports.
  if (!std::isfinite(request.screen_below) || request.screen_below < 0) {
    char bar[40];
    std::snprintf(bar, sizeof bar, "%.17g", request.screen_below);
    return messaging::job_fault(
        invalid_argument(std::string("tester: screen_below must be a finite number >= 0, got ") + bar));
  }
  TestJob job;
  auto resolved = tasks.resolve(request.task_blob, request.files);
  if (!resolved.is_ok()) return resolved.status().with_context("tester: task");
  job.package = std::move(resolved).value();
  auto reference = tasks.content(request.reference_blob, request.reference_so.data);
  if (!reference.is_ok()) return reference.status().with_context("tester: reference");
  job.reference_so = std::move(reference).value();
  auto kernel_so = proto::kernel_library(request, kMaxLibraryBytes);
  if (!kernel_so.is_ok()) return messaging::job_fault(kernel_so.status()).with_context("tester: kernel library");
  job.kernel_so = std::move(kernel_so).value();
  job.cand = request.cand;
  job.purpose = request.purpose;
  job.screen_below = request.screen_below;
  job.want_profile = request.want_profile;
  job.build = request.build;
  return job;
}

}  // namespace kiln::tester
