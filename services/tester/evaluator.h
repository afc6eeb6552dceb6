// The tester's engine: evaluates one decoded TestJob (request.h) on this tester's device and returns the
// TestReport, or a Status that says whose fault it is that there is none (messaging::outcome_for). The
// candidate's own failures are reports. Its pieces, one concept per file pair: the device served
// (tester_device.h), whether candidates run confined (confined_runs.h), the evaluation slots (slots.h), the
// evaluation child (child.h), the screening bar (screening.h) and the profiler run (profiler.h).
#pragma once

#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <string>

#include "child.h"
#include "confined_runs.h"
#include "kiln/core/status.h"
#include "kiln/proto/payloads.h"
#include "kiln/sandbox/sandbox.h"
#include "kiln/tester/confinement.h"
#include "kiln/tester/gpu_monitor.h"
#include "kiln/tester/options.h"
#include "kiln/tester/screening.h"
#include "kiln/tester/slots.h"
#include "request.h"
#include "tester_device.h"

namespace kiln::tester {

class Evaluator {
 public:
  // Fails for an evaluation child that is not there, or (cuda) no GPU to serve.
  static Result<std::unique_ptr<Evaluator>> create(TesterOptions options);
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  // Whether this tester can evaluate `job` at all, asked before anything runs: the task's backend is this
  // tester's (else the job's fault: dead-lettered), and its candidate may run here (confined, or
  // unconfined where allowed; else this worker's fault: given back). Every check of what a job needs of
  // the tester that serves it belongs here.
  Status check(const TestJob& job);
  // One evaluation (check() passed); trouble with the candidate is a report.
  Result<proto::TestReport> evaluate(const TestJob& job);

  const TesterOptions& options() const { return options_; }
  const proto::WorkerInfo& worker() const { return device_.worker; }
  const std::string& device_lock() const { return device_lock_; }
  proto::Capabilities capabilities() const;
  Status confinement() const { return confinement_.status(); }
  // cuda: exports the GPU's NVML sensors on `registry` while this lives.
  void start_gpu_monitor(std::shared_ptr<prometheus::Registry> registry);

 private:
  Evaluator(TesterOptions options, TesterDevice device);
  // With several slots, the device lock file the children share: one per device, in lock_dir.
  Status open_device_lock();
  // What the measured run's child left: its verdict, or why there is none.
  struct Run;
  Result<proto::TestReport> judge(Run& run, const sandbox::SandboxResult& child, double timeout_s,
                                  const Scratch& scratch);

  TesterOptions options_;
  TesterDevice device_;
  // TestReport.metadata common to every evaluation: the evaluation child and its hash, Kiln's version,
  // the timing options and the timeout.
  std::map<std::string, std::string> run_metadata_;
  std::string device_lock_;   // the device lock file the children share (slots > 1), else empty
  ConfinementPolicy policy_;  // how children are confined (when confinement_ says so)
  ConfinedRuns confinement_{policy_, options_};
  Slots slots_;
  SeenBars seen_bars_;  // options_.screen_by_best
  EvalChild child_{options_, policy_, confinement_, slots_, device_lock_, device_.gpu};
  std::shared_ptr<GpuMonitor> monitor_;
};

}  // namespace kiln::tester
