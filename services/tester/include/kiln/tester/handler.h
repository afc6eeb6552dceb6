// The "test.<backend>" service (DESIGN §1, §5): runs one candidate's evaluation in a sandboxed kiln-eval
// child and sends the TestReport to the scorer. A candidate that crashes, hangs or exits becomes a report
// ("crashed: SIGSEGV", "timed out after 30 s"), scored against it; the tester itself keeps serving. A fault
// that is not the candidate's is never scored (messaging::outcome_for): the evaluator's or this worker's is
// given back with its cause, the task's (a package that does not parse, another backend) dead-lettered.
//
// TestHandler is the adapter (docs/architecture.md): it decodes a job once into a TestJob (request.h), asks
// the Evaluator (evaluator.h) whether this tester can evaluate it and to evaluate it, and answers through
// outcome_for. Everything else lives in the engine's pieces, one concept per file pair.
#pragma once

#include <prometheus/registry.h>

#include <memory>
#include <string>

#include "kiln/core/status.h"
#include "kiln/messaging/handler.h"
#include "kiln/proto/payloads.h"
#include "kiln/service/service.h"
#include "kiln/tester/confinement.h"
#include "kiln/tester/gpu_monitor.h"
#include "kiln/tester/metrics.h"
#include "kiln/tester/options.h"
#include "kiln/tester/profiling.h"
#include "kiln/tester/screening.h"
#include "kiln/tester/slots.h"
#include "kiln/tester/torch_python.h"

namespace kiln::tester {

class Evaluator;
struct TestJob;

class TestHandler {
 public:
  // Fails for an evaluation child that is not there, or (cuda) no GPU to serve: such a
  // tester must not register for test.cuda, so CUDA jobs wait visibly in the queue.
  static Result<std::unique_ptr<TestHandler>> create(TesterOptions options);
  ~TestHandler();

  // A job with a TestRequest payload. Thread-safe: every evaluation has its own scratch directory.
  messaging::JobOutcome handle(const proto::Job& job);
  // One evaluation; trouble with the candidate is a report. Anything else is an error: trouble running
  // kiln-eval at all, a task package that does not parse, or kiln-eval's own evaluator_error report (the
  // task or the reference cannot be evaluated here); handle() answers those "retry".
  Result<proto::TestReport> evaluate(const proto::TestRequest& request);

  std::string service() const;
  // The device lock file the evaluation children share (tester.slots > 1), else empty.
  const std::string& device_lock() const;
  proto::Capabilities capabilities() const;
  // Ok when every evaluation child runs confined; else why not (then evaluations are refused, or run
  // unconfined with tester.allow_unconfined).
  Status confinement() const;
  // cuda: exports the GPU's NVML sensors on `registry` until this handler is destroyed.
  void start_gpu_monitor(std::shared_ptr<prometheus::Registry> registry);
  // The tester's counters (metrics.h) on `registry`.
  void start_metrics(prometheus::Registry& registry);
  // Where task packages and references named by blob come from (default: inline only). Set up before the
  // first job.
  void set_task_source(std::shared_ptr<service::TaskSource> tasks) { tasks_ = std::move(tasks); }

 private:
  explicit TestHandler(std::unique_ptr<Evaluator> evaluator);
  // The decoded job, checked against what this tester can evaluate, then evaluated.
  Result<proto::TestReport> evaluate(const TestJob& job);

  std::unique_ptr<Evaluator> evaluator_;
  std::shared_ptr<service::TaskSource> tasks_ = std::make_shared<service::TaskSource>();
  TesterMetrics metrics_;
};

// Handler factory for services/tester/main.cc: tester.* from the config, one slot (one device); for cuda,
// NVML gauges of the tester's GPU on ctx.metrics.
Result<service::ServiceHandlers> make_test_handlers(const service::ServiceContext& ctx);

}  // namespace kiln::tester
