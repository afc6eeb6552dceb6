// The tester's adapter: a job decoded once into a TestJob, checked and evaluated by the Evaluator, answered
// through messaging::outcome_for.
#include "kiln/tester/handler.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "evaluator.h"
#include "kiln/core/time.h"
#include "kiln/messaging/outcome.h"
#include "kiln/proto/ids.h"
#include "request.h"

namespace kiln::tester {
namespace {

// The answer to an evaluation that has a verdict: the report goes to the scorer either way; only a correct
// kernel is done, any other verdict is the candidate's own failure, scored against it.
messaging::JobOutcome answer(const TestJob& job, proto::TestReport report) {
  proto::ScoreResult result;
  result.cand = job.cand;
  result.stage = proto::Stage::kTest;
  result.purpose = job.purpose;
  result.build = job.build;
  result.test = std::move(report);
  std::string score_job = proto::job_id::score(job.cand.program_id, job.purpose);
  const std::optional<proto::TestStatus> verdict = result.test.status;
  const std::string message = result.test.message;
  std::vector<proto::FollowUp> next{
      proto::FollowUp{std::string(proto::svc::kScore), std::move(score_job), {proto::encode(result)}, 0}};
  if (verdict == proto::TestStatus::kOk) return messaging::JobOutcome::ok(std::move(next));
  // Wrong, crashed, too slow to finish, would not load: the candidate's own failure, scored against it.
  return messaging::JobOutcome::from_status(
      invalid_argument("test: " + (message.empty() ? std::string(proto::word_of(verdict)) : message)),
      [&](const Status&) { return std::move(next); });
}

}  // namespace

TestHandler::TestHandler(std::unique_ptr<Evaluator> evaluator) : evaluator_(std::move(evaluator)) {}
TestHandler::~TestHandler() = default;

Result<std::unique_ptr<TestHandler>> TestHandler::create(TesterOptions options) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Evaluator> evaluator, Evaluator::create(std::move(options)));
  return std::unique_ptr<TestHandler>(new TestHandler(std::move(evaluator)));
}

std::string TestHandler::service() const { return proto::test_service_for(evaluator_->options().backend); }
const std::string& TestHandler::device_lock() const { return evaluator_->device_lock(); }
proto::Capabilities TestHandler::capabilities() const { return evaluator_->capabilities(); }
Status TestHandler::confinement() const { return evaluator_->confinement(); }

void TestHandler::start_gpu_monitor(std::shared_ptr<prometheus::Registry> registry) {
  evaluator_->start_gpu_monitor(std::move(registry));
}

void TestHandler::start_metrics(prometheus::Registry& registry) {
  metrics_.start(registry, evaluator_->worker().device_name);
}

Result<proto::TestReport> TestHandler::evaluate(const proto::TestRequest& request) {
  KILN_ASSIGN_OR_RETURN(const TestJob job, decode_test_job(request, *tasks_));
  return evaluate(job);
}

Result<proto::TestReport> TestHandler::evaluate(const TestJob& job) {
  // What this tester cannot evaluate is refused before anything runs.
  KILN_RETURN_IF_ERROR(evaluator_->check(job));
  return evaluator_->evaluate(job);
}

messaging::JobOutcome TestHandler::handle(const proto::Job& job) {
  auto request = proto::decode<proto::TestRequest>(job.payload.data);
  if (!request.is_ok()) {
    return messaging::JobOutcome::from_status(
        messaging::job_fault(request.status()).with_context("test: bad TestRequest"));
  }
  Result<TestJob> decoded = internal_error("not decoded");
  Result<proto::TestReport> report = internal_error("not run");
  const double started = monotonic_s();
  try {
    decoded = decode_test_job(*request, *tasks_);
    report = decoded.is_ok() ? evaluate(*decoded) : Result<proto::TestReport>(decoded.status());
  } catch (const std::exception& e) {
    report = messaging::worker_fault(internal_error(e.what()));  // out of memory or disk, here
  }
  metrics_.count(report, monotonic_s() - started);
  // Trouble that is not the candidate's is never scored: this worker's is given back (another attempt may do
  // better), the task's is dead-lettered; either way, in the end, the scorer records the candidate as not
  // evaluated, with this cause.
  if (!report.is_ok()) return messaging::JobOutcome::from_status(report.status().with_context("test"));
  return answer(*decoded, std::move(report).value());
}

Result<service::ServiceHandlers> make_test_handlers(const service::ServiceContext& ctx) {
  if (!ctx.config) return invalid_argument("tester: no config");
  KILN_ASSIGN_OR_RETURN(TesterOptions options, options_from_config(ctx.config->tester));
  options.worker_id = ctx.worker_id;
  options.lock_dir = ctx.state_dir + "/locks";
  options.hidden_paths = kiln_private_paths(*ctx.config, ctx.state_dir, own_home());
  const int slots = static_cast<int>(std::max<int64_t>(1, options.slots));
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<TestHandler> handler, TestHandler::create(std::move(options)));
  if (ctx.tasks) handler->set_task_source(ctx.tasks);
  handler->start_gpu_monitor(ctx.metrics);
  if (ctx.metrics) handler->start_metrics(*ctx.metrics);
  service::ServiceHandlers h;
  h.job = [handler](const proto::Job& job) { return handler->handle(job); };
  h.caps = handler->capabilities();
  // One evaluation at a time unless tester.slots says more (cuda): those take turns on the device.
  h.slots = slots;
  h.service = handler->service();
  return h;
}

}  // namespace kiln::tester
