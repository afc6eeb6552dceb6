#include <prometheus/text_serializer.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "kiln/core/files.h"
#include "kiln/promoter/handler.h"
#include "kiln/proto/payloads.h"

using kiln::messaging::JobOutcome;
using kiln::messaging::Outcome;
using kiln::promoter::PromoteHandler;

namespace {

kiln::proto::CaseTiming timing(double speedup, double lo) {
  kiln::proto::CaseTiming t;
  t.dims = {{"B", 16}, {"H", 1024}};
  t.candidate.n = 30;
  t.candidate.median_us = 10;
  t.reference.n = 30;
  t.reference.median_us = 10 * speedup;
  t.speedup = speedup;
  t.speedup_lo = lo;
  t.speedup_hi = speedup + 0.1;
  return t;
}

kiln::proto::PromoteRequest request(const std::string& source) {
  kiln::proto::PromoteRequest r;
  r.campaign_id = "c7";
  r.program_id = "c7/p12";
  r.task_name = "rmsnorm_cpu";
  r.op = "rmsnorm";
  r.backend = kiln::proto::Backend::kCpu;
  r.dtype = "fp32";
  r.source = source;
  r.source_ext = "cpp";
  r.shape = {{"B", 16}, {"H", 1024}};
  r.verification.passed = true;
  r.benchmark = timing(1.5, 1.4);
  r.confirmation = timing(1.45, 1.35);
  r.timing_method = "host_clock";
  r.timing_mode = "warm";
  r.worker.device_name = r.confirm_worker.device_name = "Test CPU 3000";
  return r;
}

kiln::proto::Job job_for(const kiln::proto::PromoteRequest& r) {
  kiln::proto::Job job;
  job.job_id = r.program_id + ":promote";
  job.service = "promote";
  job.payload.data = kiln::proto::encode(r);
  return job;
}

kiln::proto::PromoteOutcome follow_up(const JobOutcome& out) {
  REQUIRE(out.next.size() == 1);
  CHECK(out.next[0].service == "score");
  CHECK(out.next[0].job_id == "c7/p12:promoted");
  auto decoded = kiln::proto::decode<kiln::proto::PromoteOutcome>(out.next[0].payload.data);
  REQUIRE(decoded.is_ok());
  CHECK(decoded->kind == "promoted");
  CHECK(decoded->campaign_id == "c7");
  CHECK(decoded->program_id == "c7/p12");
  return *decoded;
}

std::string metrics_text(prometheus::Registry& reg) { return prometheus::TextSerializer().Serialize(reg.Collect()); }

}  // namespace

TEST_CASE("the promote handler promotes, refuses and tells the scorer", "[promoter]") {
  kiln::TempDir dir;
  auto metrics = std::make_shared<prometheus::Registry>();
  auto handler = PromoteHandler::create({dir.path() + "/kernel_registry", 1.10}, metrics);
  REQUIRE(handler.is_ok());

  JobOutcome ok = (*handler)->handle(job_for(request("int kiln_entry() { return 0; }\n")));
  CHECK(ok.outcome == Outcome::kDone);
  auto promoted = follow_up(ok);
  CHECK(promoted.promoted);
  CHECK(promoted.kernel_id == "cpp_rmsnorm_testcpu3000_fp32_b16_h1024_v1");
  CHECK(ok.payload == ok.next[0].payload.data);
  CHECK(std::filesystem::exists(dir.path() + "/kernel_registry/kernels/cpp/rmsnorm/" + promoted.kernel_id + ".cpp"));

  // The same source again: refused, the kernel is not promoted twice.
  JobOutcome dup = (*handler)->handle(job_for(request("int kiln_entry() { return 0; }\n")));
  CHECK(dup.outcome == Outcome::kCandidateFault);
  CHECK(dup.payload == dup.next.at(0).payload.data);
  auto refused = follow_up(dup);
  CHECK_FALSE(refused.promoted);
  CHECK(refused.reason ==
        "duplicate of cpp_rmsnorm_testcpu3000_fp32_b16_h1024_v1: the same source up to comments and whitespace");
  // The same code with a comment added and a "new best" by noise: a duplicate too, and the scorer is told.
  auto commented = request("// now faster\nint kiln_entry() {\n  return 0;\n}\n");
  commented.confirmation = timing(1.5, 1.45);
  auto copy = follow_up((*handler)->handle(job_for(commented)));
  CHECK_FALSE(copy.promoted);
  CHECK(copy.reason.starts_with("duplicate of cpp_rmsnorm_testcpu3000_fp32_b16_h1024_v1"));

  auto slow = request("int kiln_entry() { return 1; }\n");
  slow.confirmation = timing(1.2, 1.04);
  JobOutcome low = (*handler)->handle(job_for(slow));
  CHECK(low.outcome == Outcome::kCandidateFault);
  CHECK(follow_up(low).reason == "confirmation speedup interval lower bound 1.04 < 1.10");

  kiln::proto::Job garbage;
  garbage.payload.data = "\x01\x02 not msgpack";
  JobOutcome bad = (*handler)->handle(garbage);
  CHECK(bad.outcome == Outcome::kDeadLetter);
  CHECK(bad.next.empty());
  CHECK(bad.error.starts_with("promote: cannot decode PromoteRequest"));

  std::string text = metrics_text(*metrics);
  CHECK(text.find("kiln_promotions_total{outcome=\"promoted\"} 1") != std::string::npos);
  CHECK(text.find("kiln_promotions_total{outcome=\"refused\"} 3") != std::string::npos);
  CHECK(text.find("kiln_promotions_total{outcome=\"error\"} 1") != std::string::npos);

  auto listed = (*handler)->registry().list();
  REQUIRE(listed.is_ok());
  CHECK(listed->size() == 1);
}

// The three kinds of fault, each with its one outcome: only the kernel's own is held against it.
TEST_CASE("a transient fault is given back, a permanent one dead-lettered, only the kernel's refused", "[promoter]") {
  kiln::TempDir dir;
  // The registry's folder cannot be made for now (a file is in the way): I/O trouble, given back.
  const std::string blocker = dir.path() + "/mnt";
  REQUIRE(kiln::write_file_atomic(blocker, "not a folder").is_ok());
  auto handler = PromoteHandler::create({blocker + "/kernel_registry", 1.10}, nullptr);
  REQUIRE(handler.is_ok());
  const auto job = job_for(request("int kiln_entry() { return 0; }\n"));
  JobOutcome busy = (*handler)->handle(job);
  CHECK(busy.outcome == Outcome::kRetry);
  CHECK(busy.next.empty());
  CHECK(busy.error.rfind("promote: ", 0) == 0);
  std::filesystem::remove(blocker);
  JobOutcome again = (*handler)->handle(job);  // given back, attempted again
  CHECK(again.outcome == Outcome::kDone);
  CHECK(follow_up(again).promoted);

  // A registry that cannot be read is its own fault, never the kernel's: dead-lettered, not refused.
  REQUIRE(kiln::write_file_atomic(blocker + "/kernel_registry/verified_kernels.json", "{broken").is_ok());
  JobOutcome broken = (*handler)->handle(job_for(request("int kiln_entry() { return 2; }\n")));
  CHECK(broken.outcome == Outcome::kDeadLetter);
  CHECK(broken.next.empty());  // the dead letter on the wire tells the scorer the promotion failed
  CHECK(broken.error == "promote: verified_kernels.json: not valid JSON");
  auto wire = kiln::messaging::to_result(job, broken);
  CHECK(wire.outcome == "failed");
  REQUIRE(wire.next.size() == 1);
  CHECK(wire.next[0].job_id == "dead:c7/p12:promote");

  // The kernel's own: below the bar. Refused, and the scorer is told why.
  auto slow = request("int kiln_entry() { return 3; }\n");
  slow.confirmation = timing(1.2, 1.04);
  std::filesystem::remove(blocker + "/kernel_registry/verified_kernels.json");
  JobOutcome low = (*handler)->handle(job_for(slow));
  CHECK(low.outcome == Outcome::kCandidateFault);
  auto told = follow_up(low);
  CHECK_FALSE(told.promoted);
  CHECK(told.reason == "confirmation speedup interval lower bound 1.04 < 1.10");
}

TEST_CASE("make_promote_handlers reads the config and resolves relative paths", "[promoter]") {
  kiln::TempDir dir;
  auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  kiln::config::KilnConfig config;
  config.promoter.registry_dir = "reg";
  config.promoter.min_speedup = 1.3;
  kiln::service::ServiceContext ctx;
  ctx.config = &config;
  ctx.metrics = std::make_shared<prometheus::Registry>();
  auto handlers = kiln::promoter::make_promote_handlers(ctx);
  std::filesystem::current_path(cwd);  // the registry path is resolved once, at creation
  REQUIRE(handlers.is_ok());
  CHECK(handlers->service == "promote");
  CHECK(handlers->slots == 1);
  // Passes the default 1.10 but not the configured 1.30.
  auto r = request("y");
  r.confirmation = timing(1.25, 1.2);
  JobOutcome out = handlers->job(job_for(r));
  CHECK(out.outcome == Outcome::kCandidateFault);
  CHECK(follow_up(out).reason == "confirmation speedup 1.25 < 1.30");
  CHECK(std::filesystem::exists(dir.path() + "/reg") == false);  // refusals write nothing
  CHECK(metrics_text(*ctx.metrics).find("kiln_promotions_total{outcome=\"refused\"} 1") != std::string::npos);
}

TEST_CASE("the promote handler refuses a bar under Forge's 1.10, however it is built", "[promoter]") {
  kiln::TempDir dir;
  for (double bar : {1.09, 1.0, 0.5, 0.0, -1.0}) {
    auto handler = PromoteHandler::create({dir.path() + "/kernel_registry", bar}, nullptr);
    REQUIRE_FALSE(handler.is_ok());
    CHECK(handler.status().message().starts_with("promoter: min_speedup must be at least 1.10 (Forge's bar)"));
  }
  CHECK(PromoteHandler::create({dir.path() + "/kernel_registry", 1.10}, nullptr).is_ok());
}
