// Whether this tester's candidates run confined (confinement.h): checked once at start, and again, at most
// every kRecheckConfinementS, by a tester that could not confine when a job would otherwise be refused. It
// only ever goes from unconfined to confined. Thread-safe.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

#include "kiln/core/status.h"
#include "kiln/tester/confinement.h"
#include "kiln/tester/options.h"

namespace kiln::tester {

// How often a tester that could not confine tries again, at most (on a job it would otherwise refuse).
inline constexpr double kRecheckConfinementS = 10;

class ConfinedRuns {
 public:
  // `policy` and `options` outlive this.
  ConfinedRuns(const ConfinementPolicy& policy, const TesterOptions& options) : policy_(policy), options_(options) {}

  // The check at start (or, with TesterOptions::confine off, none), logged with how candidates will run.
  void check_at_start();
  bool confined() const { return confined_.load(); }
  // Ok when every evaluation child runs confined; else why not.
  Status status() const {
    std::lock_guard lock(mu_);
    return status_;
  }
  // Fail closed: ok when a candidate may run now (confined, or unconfined where the tester was told it may
  // be); else unavailable, saying why (the job is given back).
  Status may_run();
  // Capabilities.confinement: "confined", "UNCONFINED: why" or "refuses to evaluate: why".
  std::string describe() const;

 private:
  // In a tester that refuses to evaluate because the check failed: the check once more, at most every
  // kRecheckConfinementS (a check that failed at a busy start may pass now). True when candidates may now
  // run confined.
  bool recheck();

  const ConfinementPolicy& policy_;
  const TesterOptions& options_;
  std::atomic<bool> confined_{false};
  mutable std::mutex mu_;  // guards status_ and checked_at_
  Status status_ = failed_precondition("not checked");
  double checked_at_ = 0;
};

}  // namespace kiln::tester
