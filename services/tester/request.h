// A test job decoded once, at the edge (TestHandler): what the Evaluator works from. Typed where the wire
// has words (the purpose), the task package parsed once per process (service::TaskSource), both libraries
// in hand.
#pragma once

#include <memory>
#include <string>

#include "kiln/core/status.h"
#include "kiln/proto/payloads.h"
#include "kiln/service/task_source.h"

namespace kiln::tester {

struct TestJob {
  proto::Candidate cand;  // whose kernel (its campaign keys the screening bar)
  // A first measurement, or a confirmation (it has a score job of its own): measured in full, never
  // screened nor profiled.
  proto::Purpose purpose = proto::Purpose::kEval;
  std::shared_ptr<const service::TaskPackage> package;  // the task, parsed
  std::shared_ptr<const std::string> reference_so;
  std::string kernel_so;
  double screen_below = 0;  // the campaign's bar as the request carries it: finite, >= 0
  bool want_profile = true;
  proto::BuildInfo build;  // how the kernel was built, passed on to the scorer

  const task::TaskSpec& spec() const { return package->spec; }
  bool confirmation() const { return purpose == proto::Purpose::kConfirm; }
};

// A kernel library larger than this as built is refused before it is inflated (a built kernel is kilobytes to
// a few megabytes; a message is at most broker.max_message_bytes, 64 MiB by default, deflated).
inline constexpr size_t kMaxLibraryBytes = size_t{512} << 20;

// `request` decoded: its task package and reference from `tasks` (by blob, or inline), its kernel library
// inflated. Errors say whose fault they are (messaging::outcome_for): a bad bar, package or library is the
// job's; a blob store that does not answer is this worker's.
Result<TestJob> decode_test_job(const proto::TestRequest& request, service::TaskSource& tasks);

}  // namespace kiln::tester
