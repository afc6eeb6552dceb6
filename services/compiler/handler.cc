#include "kiln/compiler/handler.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <utility>
#include <vector>

#include "build_steps.h"
#include "kiln/core/cpus.h"
#include "kiln/core/files.h"
#include "kiln/messaging/outcome.h"
#include "kiln/task/task.h"
#include "spdlog/spdlog.h"

namespace kiln::compiler {

using namespace detail;

CompileHandler::CompileHandler(CompilerOptions options, std::shared_ptr<prometheus::Registry> metrics)
    : options_(std::move(options)), metrics_(std::move(metrics)) {
  cores_ = options_.batch_cores > 0 ? static_cast<int>(options_.batch_cores) : allowed_core_count();
  cache_hits_ = &prometheus::BuildCounter()
                     .Name("kiln_compile_cache_hits_total")
                     .Help("Builds served from the content-addressed compile cache")
                     .Register(*metrics_)
                     .Add({});
  graph_fallbacks_ = &prometheus::BuildCounter()
                          .Name("kiln_compile_nvcc_graph_fallbacks_total")
                          .Help("CUDA builds whose steps failed as a graph and were run again by nvcc itself")
                          .Register(*metrics_)
                          .Add({});
  batched_ = &prometheus::BuildCounter()
                  .Name("kiln_compile_batched_builds_total")
                  .Help("CUDA builds made as one variant of a batch: one translation unit for several parameter sets")
                  .Register(*metrics_)
                  .Add({});
  batch_fallbacks_ = &prometheus::BuildCounter()
                          .Name("kiln_compile_batch_fallbacks_total")
                          .Help("Batches that did not build, whose variants were then built alone")
                          .Register(*metrics_)
                          .Add({});
}

Result<std::unique_ptr<CompileHandler>> CompileHandler::create(const CompilerOptions& options,
                                                               std::shared_ptr<prometheus::Registry> metrics) {
  if (options.cache_dir.empty()) return invalid_argument("compiler: cache_dir is empty");
  if (!(options.timeout_s > 0)) return invalid_argument("compiler: timeout_s must be positive");
  if (options.max_log_bytes <= 0) return invalid_argument("compiler: max_log_bytes must be positive");
  if (options.batch_max < 1 || options.batch_max > 64) return invalid_argument("compiler: batch_max must be 1-64");
  if (!(options.batch_window_s >= 0) || options.batch_window_s > 10)
    return invalid_argument("compiler: batch_window_s must be 0-10");
  if (options.batch_cores < 0 || options.batch_cores > 4096)
    return invalid_argument("compiler: batch_cores must be 0-4096");
  if (options.nvcc_mode != "graph" && options.nvcc_mode != "serial") {
    return invalid_argument("compiler: nvcc_mode must be graph or serial, not '" + options.nvcc_mode + "'");
  }
  KILN_RETURN_IF_ERROR(make_dirs(options.cache_dir).with_context("compiler: cache_dir"));
  if (!metrics) metrics = std::make_shared<prometheus::Registry>();
  return std::unique_ptr<CompileHandler>(new CompileHandler(options, std::move(metrics)));
}

messaging::JobOutcome CompileHandler::compile(const proto::CompileRequest& request) {
  ++in_flight_;
  struct Leave {
    std::atomic<int>& n;
    ~Leave() { --n; }
  } leave{in_flight_};
  proto::Candidate cand = request.cand;
  // Every early end is a Status that says whose fault it is, read by messaging::outcome_for: the candidate's
  // is scored (at `stage`, with `score_error` when the scorer should see more than the one line, e.g. the
  // build log); a permanent fault of the task or the request is dead-lettered; this worker's is given back.
  auto end = [&](const Status& fault, proto::Stage stage = proto::Stage::kCompile, proto::BuildInfo build = {},
                 std::string score_error = {}) {
    return messaging::JobOutcome::from_status(fault.with_context("compile"), [&](const Status&) {
      proto::ScoreResult result;
      result.cand = cand;
      result.stage = stage;
      result.purpose = request.purpose;
      result.error = score_error.empty() ? fault.message() : std::move(score_error);
      result.build = std::move(build);
      return std::vector<proto::FollowUp>{proto::FollowUp{std::string(proto::svc::kScore),
                                                          proto::job_id::score(cand.program_id, request.purpose),
                                                          {proto::encode(result)},
                                                          0}};
    });
  };

  auto package = tasks_->resolve(request.task_blob, request.files);
  if (!package.is_ok()) return end(package.status());
  const proto::FileMap& files = (*package)->files;
  const task::TaskSpec& spec = (*package)->spec;
  // Every proposal's code passes here before anything is built, whoever proposed it (tuner, LLM, an
  // external bridge's compile job): the task's kernel outside the editable regions is Kiln's. A proposal
  // that changed it, or whose region bodies do not fit, is scored as no code (stage "propose").
  auto accepted = task::accept_proposal(files.at(spec.kernel_file).data, cand.code, cand.regions);
  if (!accepted.is_ok()) return end(messaging::candidate_fault(accepted.status()), proto::Stage::kPropose);
  cand.code = std::move(accepted).value();
  cand.regions.clear();
  const proto::Backend backend = spec.backend;
  if (request.backend && *request.backend != backend) {
    return end(failed_precondition("the request is for backend '" + std::string(proto::name(*request.backend)) +
                                   "' but the task's is '" + std::string(proto::name(backend)) + "'"));
  }
  if (Status st = check_params(cand.params); !st.is_ok()) return end(st);
  const std::string arch = backend == proto::Backend::kCuda && !request.arch.empty() && request.arch != "native"
                               ? request.arch
                               : options_.cuda_arch;

  // The reference is built first: what goes wrong with it is never the candidate's. A reference that does
  // not compile will not compile on the next attempt either; one that ran out of time may, on a less busy
  // machine. A PyTorch reference (reference.py) is not built: the tester's Python runs it.
  proto::BuildInfo nothing_to_build;
  nothing_to_build.ok = true;
  auto reference = spec.torch_reference()
                       ? Result<Build>(Build{nothing_to_build, "", false})
                       : build(backend, arch, files, spec.reference_file, files.at(spec.reference_file).data, {});
  if (!reference.is_ok()) return end(messaging::worker_fault(reference.status().with_context("toolchain")));
  if (!reference->info.ok) {
    const std::string why = "the reference failed to build (a problem of the task, not of the candidate):\n" +
                            trim_log(reference->info.log, kMaxRetryLogBytes);
    return end(reference->timed_out ? deadline_exceeded(why) : failed_precondition(why));
  }
  const bool confirmation = request.purpose == proto::Purpose::kConfirm;
  auto kernel = build(backend, arch, files, spec.kernel_file, cand.code, cand.params, !confirmation);
  if (!kernel.is_ok()) return end(messaging::worker_fault(kernel.status().with_context("toolchain")));
  if (!kernel->info.ok) {
    return end(invalid_argument("the candidate does not build: " + kernel->info.process.message),
               proto::Stage::kCompile, kernel->info, kernel->info.log);
  }
  return messaging::JobOutcome::ok({test_job(request, cand, **package, std::move(*reference), std::move(*kernel))});
}

proto::FollowUp CompileHandler::test_job(const proto::CompileRequest& request, const proto::Candidate& cand,
                                         const service::TaskPackage& package, Build reference, Build kernel) {
  proto::TestRequest test;
  test.cand = cand;
  test.purpose = request.purpose;
  // The package and the reference go by name when they can (one fetch per tester, not one copy per job).
  test.task_blob = package.blob.empty() ? tasks_->publish(package.files) : package.blob;
  if (test.task_blob.empty()) test.files = package.files;
  test.reference_blob = tasks_->publish_bytes(reference.so);
  if (test.reference_blob.empty()) test.reference_so = proto::Bytes{std::move(reference.so)};
  proto::set_kernel_library(test, std::move(kernel.so));
  test.build = kernel.info;
  test.screen_below = request.screen_below;
  test.want_profile = request.want_profile;
  return proto::FollowUp{proto::test_service_for(package.spec.backend),
                         proto::job_id::test(cand.program_id, request.purpose),
                         {proto::encode(test)},
                         0,
                         request.avoid_tester,
                         request.tester_device};
}

messaging::JobOutcome CompileHandler::handle(const proto::Job& job) {
  auto request = proto::decode<proto::CompileRequest>(job.payload.data);
  if (!request.is_ok()) {
    return messaging::JobOutcome::from_status(
        messaging::job_fault(request.status()).with_context("compile: bad CompileRequest"));
  }
  try {
    return compile(*request);
  } catch (const std::exception& e) {
    // Out of memory or a full disk on this worker: another attempt, maybe elsewhere, may succeed.
    return messaging::JobOutcome::from_status(
        messaging::worker_fault(internal_error(std::string("compile: ") + e.what())));
  }
}

Result<service::ServiceHandlers> make_compile_handlers(const service::ServiceContext& ctx) {
  if (!ctx.config) return invalid_argument("compiler: no config");
  auto options = options_from_config(ctx.config->compiler, ctx.state_dir);
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<CompileHandler> handler, CompileHandler::create(options, ctx.metrics));
  if (ctx.tasks) handler->set_task_source(ctx.tasks);
  service::ServiceHandlers h;
  h.job = [handler](const proto::Job& job) { return handler->handle(job); };
  h.caps = handler->capabilities();
  if (h.caps.toolchain.empty()) spdlog::warn("compiler: {} does not answer --version", options.cxx);
  h.slots = static_cast<int>(std::max<int64_t>(1, ctx.config->compiler.slots));
  h.service = std::string(proto::svc::kCompile);
  return h;
}

}  // namespace kiln::compiler
