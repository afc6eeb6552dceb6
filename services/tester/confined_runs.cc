#include "confined_runs.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "kiln/core/time.h"
#include "kiln/sandbox/sandbox.h"

namespace kiln::tester {

void ConfinedRuns::check_at_start() {
  const TesterOptions& o = options_;
  std::lock_guard lock(mu_);
  status_ = o.confine ? check_confinement(policy_)
                      : failed_precondition("confinement is off for this tester (TesterOptions::confine)");
  checked_at_ = monotonic_s();
  confined_ = status_.is_ok();
  if (status_.is_ok()) {
    spdlog::info("tester: candidates run confined: {}, read-only root, PID, mount and network namespaces",
                 sandbox::can_map_other_ids() ? "as uid " + std::to_string(o.sandbox_uid) + "+slot"
                                              : "in a user namespace of uid " + std::to_string(geteuid()));
  } else if (o.allow_unconfined || !o.confine) {
    spdlog::warn("tester: candidates run UNCONFINED ({}): {}",
                 o.confine ? "tester.allow_unconfined" : "confinement off", status_.message());
  } else {
    spdlog::error(
        "tester: cannot confine candidates here, so every evaluation is refused: {} "
        "(tester.allow_unconfined: 1 runs them unconfined, for development only)",
        status_.message());
  }
}

bool ConfinedRuns::recheck() {
  std::lock_guard lock(mu_);
  if (confined_.load()) return true;
  if (!options_.confine || monotonic_s() - checked_at_ < kRecheckConfinementS) return false;
  status_ = check_confinement(policy_);
  checked_at_ = monotonic_s();
  if (!status_.is_ok()) return false;
  spdlog::info("tester: confinement works now; candidates run confined from here on");
  confined_ = true;
  return true;
}

Status ConfinedRuns::may_run() {
  // Fail closed: a candidate is never run unconfined unless the tester was told it may be.
  if (!confined() && options_.confine && !options_.allow_unconfined && !recheck()) {
    return unavailable("tester: cannot confine the candidate here, so it is not evaluated: " + status().message() +
                       " (tester.allow_unconfined: 1 runs candidates unconfined, for "
                       "development only)");
  }
  return Status::ok();
}

std::string ConfinedRuns::describe() const {
  const Status confinement = status();
  return confinement.is_ok()                              ? "confined"
         : options_.allow_unconfined || !options_.confine ? "UNCONFINED: " + confinement.message()
                                                          : "refuses to evaluate: " + confinement.message();
}

}  // namespace kiln::tester
