#include <prometheus/registry.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kiln/compiler/handler.h"
#include "kiln/core/files.h"
#include "kiln/core/hash.h"
#include "kiln/messaging/blobs.h"
#include "kiln/proto/wire.h"
#include "kiln/sandbox/sandbox.h"
#include "kiln/service/task_source.h"
#include "kiln/task/task.h"
#include "kiln/testing/skip.h"

using kiln::compiler::CompileHandler;
using kiln::compiler::CompilerOptions;
using kiln::messaging::Outcome;

namespace {

// Skips the test case (ctest reports it skipped) where this machine has no nvcc.
void require_nvcc(const CompilerOptions& options) {
  if (access(options.nvcc.c_str(), X_OK) != 0) KILN_SKIP("no nvcc at " << options.nvcc);
}

kiln::proto::FileMap rmsnorm_files() {
  auto files = kiln::task::load_package(KILN_SOURCE_DIR "/configs/tasks/rmsnorm");
  REQUIRE(files.is_ok());
  return *files;
}

kiln::proto::CompileRequest request_for(const kiln::proto::FileMap& files, const std::string& program_id) {
  kiln::proto::CompileRequest req;
  req.cand.campaign_id = "c1";
  req.cand.program_id = program_id;
  req.cand.code = files.at("kernel.cpp").data;
  req.backend = kiln::proto::Backend::kCpu;
  req.arch = "native";
  req.files = files;
  return req;
}

kiln::proto::Job job_for(const kiln::proto::CompileRequest& req) {
  kiln::proto::Job job;
  job.job_id = req.cand.program_id + ":compile";
  job.service = "compile";
  job.payload.data = kiln::proto::encode(req);
  return job;
}

struct Fixture {
  kiln::TempDir cache{"kiln-compiler-test"};
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<CompileHandler> handler;

  explicit Fixture(CompilerOptions options = {}) {
    options.cache_dir = cache.path() + "/cache";
    auto h = CompileHandler::create(options, registry);
    REQUIRE(h.is_ok());
    handler = std::move(h).value();
  }

  double counter(const std::string& name) const {
    for (const auto& family : registry->Collect()) {
      if (family.name == name) return family.metric.at(0).counter.value;
    }
    return -1;
  }
  double cache_hits() const { return counter("kiln_compile_cache_hits_total"); }
};

// The verdict of a candidate's own failure: the job is answered, and the scorer scores it.
kiln::proto::ScoreResult score_of(const kiln::messaging::JobOutcome& out, const std::string& program_id) {
  REQUIRE(out.outcome == Outcome::kCandidateFault);
  REQUIRE(out.next.size() == 1);
  CHECK(out.next[0].service == "score");
  CHECK(out.next[0].job_id == program_id + ":score");
  auto score = kiln::proto::decode<kiln::proto::ScoreResult>(out.next[0].payload.data);
  REQUIRE(score.is_ok());
  CHECK(score->kind == "result");
  CHECK(score->stage == kiln::proto::Stage::kCompile);
  CHECK(score->cand.program_id == program_id);
  return *score;
}

}  // namespace

TEST_CASE("a CPU candidate and its reference are built and sent to the tester", "[compiler]") {
  Fixture f;
  auto files = rmsnorm_files();
  auto req = request_for(files, "c1/p1");
  req.cand.params = {{"THREADS", "2"}, {"VEC", "8"}};
  req.avoid_tester = "tester-7";   // a confirmation: another tester than the first measurement's,
  req.tester_device = "Test CPU";  // of the same device model
  req.screen_below = 2.5;          // the campaign's bar goes on to the tester
  req.want_profile = false;        // as does whether its proposer reads profiles
  auto out = f.handler->handle(job_for(req));
  REQUIRE(out.outcome == Outcome::kDone);
  REQUIRE(out.next.size() == 1);
  CHECK(out.next[0].service == "test.cpu");
  CHECK(out.next[0].job_id == "c1/p1:test");
  CHECK(out.next[0].avoid_worker == "tester-7");
  CHECK(out.next[0].device == "Test CPU");
  auto test = kiln::proto::decode<kiln::proto::TestRequest>(out.next[0].payload.data);
  REQUIRE(test.is_ok());
  CHECK(test->purpose == kiln::proto::Purpose::kEval);
  CHECK(test->cand.program_id == "c1/p1");
  CHECK(test->files == files);
  CHECK(test->screen_below == 2.5);
  CHECK_FALSE(test->want_profile);
  // The kernel library travels deflated (smaller), and inflates to the library as built.
  CHECK(test->kernel_so_encoding == "deflate");
  const std::string kernel_so = kiln::proto::kernel_library(*test, 1 << 26).value();
  CHECK(test->kernel_so.data.size() < kernel_so.size());
  CHECK(kernel_so.rfind("\x7f"
                        "ELF",
                        0) == 0);
  CHECK(test->reference_so.data.rfind("\x7f"
                                      "ELF",
                                      0) == 0);
  CHECK(kernel_so != test->reference_so.data);
  const auto& b = test->build;
  CHECK(b.ok);
  CHECK(b.compiler == "g++");
  // Only CUDA builds are lean (kiln/compiler/lean_headers.h): a C++ build has every header it includes.
  CHECK(b.flags == "-O3 -march=native -fopenmp -shared -fPIC -std=c++17 -I. -DTHREADS=2 -DVEC=8");
  CHECK(b.toolchain.rfind("g++", 0) == 0);
  CHECK_FALSE(b.cache_hit);
  CHECK(b.kernel_sha256 == kiln::sha256_hex(kernel_so));
  CHECK(b.registers == -1);
  CHECK(b.process.returncode == 0);
  CHECK(b.process.message.empty());
  CHECK(f.cache_hits() == 0);
}

TEST_CASE("a confirmation goes on to the tester and the scorer by its purpose alone", "[compiler][confirm]") {
  Fixture f;
  auto files = rmsnorm_files();
  auto req = request_for(files, "c1/p1");
  req.purpose = kiln::proto::Purpose::kConfirm;
  auto out = f.handler->handle(job_for(req));
  REQUIRE(out.outcome == Outcome::kDone);
  REQUIRE(out.next.size() == 1);
  // Its own test job (never the first measurement's "c1/p1:test"), for the program as it is.
  CHECK(out.next[0].job_id == "c1/p1:test-confirm");
  auto test = kiln::proto::decode<kiln::proto::TestRequest>(out.next[0].payload.data);
  REQUIRE(test.is_ok());
  CHECK(test->purpose == kiln::proto::Purpose::kConfirm);
  CHECK(test->cand.program_id == "c1/p1");

  // A confirmation that does not build is scored as one, under its own score job.
  auto region = kiln::task::replace_region(req.cand.code, "  this is not C++;\n");
  REQUIRE(region.is_ok());
  req.cand.code = *region;
  auto failed = f.handler->handle(job_for(req));
  REQUIRE(failed.outcome == Outcome::kCandidateFault);
  REQUIRE(failed.next.size() == 1);
  CHECK(failed.next[0].job_id == "c1/p1:score-confirm");
  auto score = kiln::proto::decode<kiln::proto::ScoreResult>(failed.next[0].payload.data);
  REQUIRE(score.is_ok());
  CHECK(score->purpose == kiln::proto::Purpose::kConfirm);
  CHECK(score->stage == kiln::proto::Stage::kCompile);
  CHECK(score->cand.program_id == "c1/p1");
}

TEST_CASE("a compile job that names its package by blob sends a test job that names the package and the reference",
          "[compiler][blobs]") {
  Fixture f;
  std::map<std::string, std::string> store;
  auto blobs = std::make_shared<kiln::messaging::BlobClient>(
      [&store](std::string_view method, const std::string& body) -> kiln::Result<std::string> {
        if (method == kiln::proto::blob_method::kPut) {
          auto b = kiln::proto::decode<kiln::proto::Blob>(body).value();
          store[b.sha256] = b.data.data;
          return std::string();
        }
        auto q = kiln::proto::decode<kiln::proto::BlobQuery>(body).value();
        if (!store.count(q.sha256)) return kiln::unavailable("no blob");
        if (method == kiln::proto::blob_method::kHas) return std::string();
        return kiln::proto::encode(kiln::proto::Blob{q.sha256, kiln::proto::Bytes{store[q.sha256]}});
      });
  auto tasks = std::make_shared<kiln::service::TaskSource>(blobs);
  f.handler->set_task_source(tasks);
  const auto files = rmsnorm_files();
  auto req = request_for(files, "c1/p1");
  kiln::service::attach_task(*tasks, files, &req.files, &req.task_blob);
  REQUIRE(req.files.empty());
  auto out = f.handler->compile(req);
  REQUIRE(out.next.size() == 1);
  auto test = kiln::proto::decode<kiln::proto::TestRequest>(out.next[0].payload.data);
  REQUIRE(test.is_ok());
  CHECK(test->files.empty());
  CHECK(test->task_blob == req.task_blob);
  CHECK(test->reference_so.data.empty());
  REQUIRE(store.count(test->reference_blob) == 1);
  CHECK(store[test->reference_blob].rfind("\x7f"
                                          "ELF",
                                          0) == 0);
  CHECK(kiln::proto::kernel_library(*test, 1 << 26).value() != store[test->reference_blob]);

  // A package named by blob that the store does not hold: given back, not scored.
  auto lost = request_for(files, "c1/p2");
  lost.files.clear();
  lost.task_blob = kiln::sha256_hex("a package nobody put");
  auto retried = f.handler->compile(lost);
  CHECK(retried.outcome == kiln::messaging::Outcome::kRetry);
  CHECK(retried.next.empty());
}

TEST_CASE("builds come from the cache the second time", "[compiler]") {
  Fixture f;
  auto files = rmsnorm_files();
  auto first = f.handler->compile(request_for(files, "c1/p1"));
  REQUIRE(first.next.size() == 1);
  CHECK(f.cache_hits() == 0);

  // Another candidate with the same code: both the reference and the kernel are cache hits.
  auto second = f.handler->compile(request_for(files, "c1/p2"));
  REQUIRE(second.next.size() == 1);
  CHECK(f.cache_hits() == 2);
  auto a = kiln::proto::decode<kiln::proto::TestRequest>(first.next[0].payload.data);
  auto b = kiln::proto::decode<kiln::proto::TestRequest>(second.next[0].payload.data);
  REQUIRE(a.is_ok());
  REQUIRE(b.is_ok());
  CHECK(b->build.cache_hit);
  CHECK(b->kernel_so == a->kernel_so);
  CHECK(b->cand.program_id == "c1/p2");

  // A different parameter is a different build; the reference still comes from the cache.
  auto req = request_for(files, "c1/p3");
  req.cand.params = {{"VEC", "4"}};
  auto third = f.handler->compile(req);
  REQUIRE(third.next.size() == 1);
  auto c = kiln::proto::decode<kiln::proto::TestRequest>(third.next[0].payload.data);
  REQUIRE(c.is_ok());
  CHECK_FALSE(c->build.cache_hit);
  CHECK(f.cache_hits() == 3);
}

TEST_CASE("a candidate that does not compile goes to the scorer with its log", "[compiler]") {
  CompilerOptions options;
  options.max_log_bytes = 600;
  Fixture f(options);
  auto files = rmsnorm_files();
  auto req = request_for(files, "c1/p4");
  auto region = kiln::task::replace_region(req.cand.code, "  this is not C++;\n");
  REQUIRE(region.is_ok());
  req.cand.code = *region;
  auto score = score_of(f.handler->handle(job_for(req)), "c1/p4");
  CHECK_FALSE(score.build.ok);
  CHECK(score.build.compiler == "g++");
  CHECK(score.error.find("error") != std::string::npos);
  CHECK(score.error.find("kernel.cpp:") != std::string::npos);
  CHECK(score.error.find("/tmp/") == std::string::npos);  // scratch paths are stripped
  CHECK(score.error.size() <= 600 + 40);
  CHECK(score.error == score.build.log);
  // The compiler's run on the wire: its return code and its streams apart, within the same cap.
  const auto& p = score.build.process;
  CHECK(p.returncode == 1);
  CHECK(p.message == "exit code 1");
  CHECK(p.stderr_text.find("error") != std::string::npos);
  CHECK(p.stderr_text.find("/tmp/") == std::string::npos);
  CHECK(p.stdout_text.size() + p.stderr_text.size() <= 600 + 80);
  CHECK(kiln::proto::combined_output(p).rfind("exit code 1\n", 0) == 0);
}

TEST_CASE("a candidate that changed code outside the editable regions is not built", "[compiler][regions]") {
  Fixture f;
  auto files = rmsnorm_files();
  auto req = request_for(files, "c1/p9");
  req.cand.code = "#include <stdlib.h>\n" + req.cand.code;
  auto out = f.handler->compile(req);
  CHECK(out.outcome == Outcome::kCandidateFault);
  REQUIRE(out.next.size() == 1);
  REQUIRE(out.next[0].service == "score");
  auto score = kiln::proto::decode<kiln::proto::ScoreResult>(out.next[0].payload.data);
  REQUIRE(score.is_ok());
  CHECK(score->stage == kiln::proto::Stage::kPropose);  // scored as no code: perf_score 0
  CHECK(score->error.rfind("the proposal changed code outside the editable regions (line 1: \"#include <stdlib.h>\"",
                           0) == 0);
  CHECK(score->build.compiler.empty());      // refused before any compiler ran
  CHECK(score->cand.code == req.cand.code);  // the scorer keeps what was proposed

  auto bodies_req = request_for(files, "c1/p10");
  bodies_req.cand.code.clear();
  bodies_req.cand.regions = {"a;\n", "b;\n"};
  auto bodies = kiln::proto::decode<kiln::proto::ScoreResult>(f.handler->compile(bodies_req).next.at(0).payload.data);
  REQUIRE(bodies.is_ok());
  CHECK(bodies->stage == kiln::proto::Stage::kPropose);
  CHECK(bodies->error == "the proposal has 2 region bodies where the task's kernel has 1 editable region");
}

TEST_CASE("region bodies are spliced into the task's kernel and built", "[compiler][regions]") {
  Fixture f;
  auto files = rmsnorm_files();
  auto req = request_for(files, "c1/p11");
  const std::string kernel = req.cand.code;
  auto original = kiln::task::region_bodies(kernel);
  REQUIRE(original.is_ok());
  REQUIRE(original->size() == 1);
  req.cand.code.clear();
  req.cand.regions = {"// the same body, with a note\n" + original->front()};
  auto out = f.handler->compile(req);
  REQUIRE(out.next.size() == 1);
  REQUIRE(out.next[0].service == "test.cpu");
  auto test = kiln::proto::decode<kiln::proto::TestRequest>(out.next[0].payload.data);
  REQUIRE(test.is_ok());
  CHECK(test->build.ok);
  CHECK(test->cand.regions.empty());
  CHECK(test->cand.code == kiln::task::replace_region(kernel, req.cand.regions.front()).value());
}

TEST_CASE("a reference that does not build is dead-lettered as the task's problem, never scored", "[compiler]") {
  Fixture f;
  auto files = rmsnorm_files();
  files["reference.cpp"].data = "#error the reference is broken\n";
  auto out = f.handler->handle(job_for(request_for(files, "c1/p5")));
  CHECK(out.outcome == Outcome::kDeadLetter);  // the next attempt would fail the same way
  CHECK(out.next.empty());                     // no verdict for the scorer: the candidate was never judged
  CHECK(out.error.rfind("compile: the reference failed to build (a problem of the task, not of the candidate):\n", 0) ==
        0);
  CHECK(out.error.find("the reference is broken") != std::string::npos);
}

TEST_CASE("a missing toolchain is given back, not thrown and not scored", "[compiler]") {
  CompilerOptions options;
  options.cxx = "/nonexistent/g++";
  Fixture f(options);
  auto out = f.handler->compile(request_for(rmsnorm_files(), "c1/p6"));
  CHECK(out.outcome == Outcome::kRetry);
  CHECK(out.next.empty());
  CHECK(out.error.rfind("compile: toolchain: ", 0) == 0);
  CHECK(out.error.find("/nonexistent/g++") != std::string::npos);
}

TEST_CASE("a compiler that crashes on the candidate is given back, not scored", "[compiler]") {
  // A g++ that dies of SIGSEGV when it is given the candidate's file (and builds the reference).
  kiln::TempDir bin("kiln-fake-cxx");
  const std::string cxx = bin.path() + "/crashing-g++";
  REQUIRE(kiln::write_file_atomic(cxx,
                                  "#!/bin/sh\n"
                                  "for arg; do [ \"$arg\" = kernel.cpp ] && kill -SEGV $$; done\n"
                                  "exec g++ \"$@\"\n")
              .is_ok());
  REQUIRE(::chmod(cxx.c_str(), 0755) == 0);
  CompilerOptions options;
  options.cxx = cxx;
  Fixture f(options);
  auto out = f.handler->compile(request_for(rmsnorm_files(), "c1/p9"));
  CHECK(out.outcome == Outcome::kRetry);
  CHECK(out.next.empty());
  CHECK(out.error.rfind("compile: toolchain: " + cxx + " killed by SIGSEGV building kernel.cpp", 0) == 0);
}

TEST_CASE("a compiler that takes too long is stopped: the candidate's failure, or the task's", "[compiler]") {
  // A first build caches the reference, so a handler sharing the cache with a short limit meets the limit
  // only on the candidate.
  Fixture f;
  auto files = rmsnorm_files();
  REQUIRE(f.handler->compile(request_for(files, "c1/p7")).next.at(0).service == "test.cpu");
  CompilerOptions options;
  options.timeout_s = 0.05;
  options.cache_dir = f.cache.path() + "/cache";
  auto created = CompileHandler::create(options, nullptr);
  REQUIRE(created.is_ok());
  CompileHandler& quick = **created;
  REQUIRE(quick.toolchain(kiln::proto::Backend::kCpu).is_ok());  // the version query has its own, longer limit

  auto req = request_for(files, "c1/p8");
  req.cand.params = {{"THREADS", "3"}};  // a build the cache does not have
  auto score = score_of(quick.compile(req), "c1/p8");
  CHECK(score.error.find("compile timed out after 0.05 s") != std::string::npos);

  // A reference too slow to build is never the candidate's; a less busy machine may build it in time: the
  // job is given back.
  files["reference.cpp"].data += "\n// not in the cache\n";
  auto out = quick.compile(request_for(files, "c1/p9"));
  CHECK(out.outcome == Outcome::kRetry);
  CHECK(out.error.rfind("compile: the reference failed to build", 0) == 0);
  CHECK(out.error.find("compile timed out after 0.05 s") != std::string::npos);
}

TEST_CASE("the build tools run with huge pages asked of glibc unless turned off", "[compiler]") {
  // A g++ that fails the candidate's build and says what GLIBC_TUNABLES it was given.
  kiln::TempDir bin("kiln-env-cxx");
  const std::string cxx = bin.path() + "/env-g++";
  REQUIRE(
      kiln::write_file_atomic(cxx,
                              "#!/bin/sh\n"
                              "for arg; do\n"
                              "  [ \"$arg\" = kernel.cpp ] && { echo \"tunables=[$GLIBC_TUNABLES]\" >&2; exit 1; }\n"
                              "done\n"
                              "exec g++ \"$@\"\n")
          .is_ok());
  REQUIRE(::chmod(cxx.c_str(), 0755) == 0);
  for (bool huge : {true, false}) {
    CompilerOptions options;
    options.cxx = cxx;
    options.huge_pages = huge;
    Fixture f(options);
    auto score = score_of(f.handler->compile(request_for(rmsnorm_files(), "c1/p30")), "c1/p30");
    CHECK_FALSE(score.build.ok);
    INFO(score.error);
    CHECK(score.error.find(huge ? "tunables=[glibc.malloc.hugetlb=1:glibc.malloc.top_pad=67108864]" : "tunables=[]") !=
          std::string::npos);
  }
  auto config = kiln::config::KilnConfig{}.compiler;
  CHECK(kiln::compiler::options_from_config(config, "").huge_pages);
  config.huge_pages = "off";
  CHECK_FALSE(kiln::compiler::options_from_config(config, "").huge_pages);
}

// The three kinds of fault, each with its one outcome: only the candidate's own is scored against it.
TEST_CASE("a transient fault is given back, a permanent one dead-lettered, only the candidate's scored", "[compiler]") {
  // A g++ that crashes once on the candidate (the toolchain's fault, this time only) and then builds it.
  kiln::TempDir bin("kiln-flaky-cxx");
  const std::string cxx = bin.path() + "/flaky-g++";
  const std::string crashed_once = bin.path() + "/crashed-once";
  REQUIRE(kiln::write_file_atomic(cxx,
                                  "#!/bin/sh\n"
                                  "for arg; do\n"
                                  "  if [ \"$arg\" = kernel.cpp ] && [ ! -e " +
                                      crashed_once +
                                      " ]; then\n"
                                      "    touch " +
                                      crashed_once +
                                      "; kill -SEGV $$\n"
                                      "  fi\n"
                                      "done\n"
                                      "exec g++ \"$@\"\n")
              .is_ok());
  REQUIRE(::chmod(cxx.c_str(), 0755) == 0);
  CompilerOptions options;
  options.cxx = cxx;
  Fixture f(options);
  auto files = rmsnorm_files();
  const auto job = job_for(request_for(files, "c1/p20"));

  auto first = f.handler->handle(job);
  CHECK(first.outcome == Outcome::kRetry);
  CHECK(first.next.empty());
  auto second = f.handler->handle(job);  // the job given back, attempted again
  CHECK(second.outcome == Outcome::kDone);
  REQUIRE(second.next.size() == 1);
  CHECK(second.next[0].service == "test.cpu");

  // Permanent and not the candidate's: a task package that does not parse, a request for another backend.
  auto unparsable = files;
  unparsable.erase("task.yaml");
  auto no_task = f.handler->handle(job_for(request_for(unparsable, "c1/p21")));
  CHECK(no_task.outcome == Outcome::kDeadLetter);
  CHECK(no_task.next.empty());
  CHECK(no_task.error.rfind("compile: task package: ", 0) == 0);
  auto cuda_req = request_for(files, "c1/p22");
  cuda_req.backend = kiln::proto::Backend::kCuda;
  auto wrong_backend = f.handler->handle(job_for(cuda_req));
  CHECK(wrong_backend.outcome == Outcome::kDeadLetter);
  CHECK(wrong_backend.error.find("the task's is 'cpu'") != std::string::npos);
  // On the wire the broker completes it and the scorer hears at once that the candidate was not evaluated.
  auto wire = kiln::messaging::to_result(job_for(cuda_req), wrong_backend);
  CHECK(wire.outcome == "failed");
  REQUIRE(wire.next.size() == 1);
  CHECK(wire.next[0].job_id == "dead:c1/p22:compile");
  auto letter = kiln::proto::decode<kiln::proto::DeadLetter>(wire.next[0].payload.data);
  REQUIRE(letter.is_ok());
  CHECK(letter->worker_retry);

  // The candidate's own: it does not build. Scored, at the compile stage, with its log.
  auto req = request_for(files, "c1/p23");
  req.cand.code = kiln::task::replace_region(req.cand.code, "  not C++ at all;\n").value();
  auto out = f.handler->handle(job_for(req));
  CHECK(out.error.rfind("compile: the candidate does not build: exit code 1", 0) == 0);
  auto score = score_of(out, "c1/p23");
  CHECK_FALSE(score.build.ok);
  CHECK(score.error.find("not C++") != std::string::npos);
}

TEST_CASE("bad parameters and bad payloads are refused", "[compiler]") {
  Fixture f;
  auto req = request_for(rmsnorm_files(), "c1/p8");
  req.cand.params = {{"VEC", "8 -fplugin=evil.so"}};
  auto score = score_of(f.handler->compile(req), "c1/p8");
  CHECK(score.error.find("is not allowed") != std::string::npos);

  kiln::proto::Job junk;
  junk.job_id = "x:compile";
  junk.payload.data = "\x93not msgpack";
  auto out = f.handler->handle(junk);
  CHECK(out.outcome == Outcome::kDeadLetter);  // no attempt can read it; it is no candidate's doing
  CHECK(out.error.rfind("compile: bad CompileRequest", 0) == 0);
}

namespace {

// A small CUDA task whose kernel uses shared memory (so ptxas has something to report).
kiln::proto::CompileRequest twice_request(const std::string& kernel) {
  kiln::proto::FileMap files;
  files["task.yaml"].data = R"(name: twice
backend: cuda
dtype: fp32
inputs: [{name: x, dtype: fp32, shape: [N], init: normal}]
outputs: [{name: y, dtype: fp32, shape: [N]}]
correctness: {cases: [{N: 1000}]}
benchmark: {cases: [{N: 1000000}]}
params: {BLOCK: [128, 256]}
)";
  files["kernel.cu"].data = kernel;
  files["reference.cu"].data = R"(#include "kiln/kernel_abi.h"
__global__ void twice(float* y, const float* x, long n) {
  long i = blockIdx.x * 256l + threadIdx.x;
  if (i < n) y[i] = 2.f * x[i];
}
extern "C" KILN_EXPORT int kiln_entry(const kiln_args* a) {
  long n = a->inputs[0].shape[0];
  twice<<<(n + 255) / 256, 256, 0, (cudaStream_t)a->stream>>>((float*)a->outputs[0].data,
                                                           (const float*)a->inputs[0].data, n);
  return 0;
}
)";
  kiln::proto::CompileRequest req;
  req.cand.program_id = "c3/p1";
  req.cand.code = kernel;
  req.cand.params = {{"BLOCK", "256"}};
  req.backend = kiln::proto::Backend::kCuda;
  req.arch = "sm_90";
  req.files = files;
  return req;
}

const char* kTwiceKernel = R"(#include "kiln/kernel_abi.h"
#ifndef BLOCK
#define BLOCK 128
#endif
__global__ void twice(float* y, const float* x, long n) {
  __shared__ float tile[BLOCK];
  long i = blockIdx.x * (long)BLOCK + threadIdx.x;
  tile[threadIdx.x] = i < n ? x[i] : 0.f;
  __syncthreads();
  if (i < n) y[i] = 2.f * tile[threadIdx.x];
}
extern "C" KILN_EXPORT int kiln_entry(const kiln_args* a) {
  long n = a->inputs[0].shape[0];
  // [EVOLVE_START]
  twice<<<(n + BLOCK - 1) / BLOCK, BLOCK, 0, (cudaStream_t)a->stream>>>(
      (float*)a->outputs[0].data, (const float*)a->inputs[0].data, n);
  // [EVOLVE_END]
  return 0;
}
)";

// Runs `argv` on a shared object (written as k.so in a scratch folder); the finished run and that folder.
struct OnLibrary {
  kiln::TempDir dir{"kiln-so-tool"};
  kiln::sandbox::SandboxResult run;
};
std::unique_ptr<OnLibrary> run_on_library(const std::string& so, std::vector<std::string> argv) {
  auto out = std::make_unique<OnLibrary>();
  REQUIRE(kiln::write_file(out->dir.path() + "/k.so", so).is_ok());
  kiln::sandbox::SandboxOptions o;
  o.argv = std::move(argv);
  o.working_dir = out->dir.path();
  o.env = {"PATH=/usr/bin:/bin"};
  o.timeout_s = 60;
  auto r = kiln::sandbox::run_sandboxed(o);
  REQUIRE(r.is_ok());
  INFO(r->stderr_text);
  REQUIRE(r->succeeded());
  out->run = std::move(r).value();
  return out;
}

// What cuobjdump (beside nvcc) finds embedded in a shared object: "" when there is no cuobjdump.
std::string embedded_images(const std::string& nvcc, const std::string& so) {
  const std::string cuobjdump = nvcc.substr(0, nvcc.rfind('/') + 1) + "cuobjdump";
  if (access(cuobjdump.c_str(), X_OK) != 0) return "";
  return run_on_library(so, {cuobjdump, "--list-elf", "--list-ptx", "k.so"})->run.stdout_text;
}

// The fat binaries a shared object embeds (its .nv_fatbin section, read by objcopy); "" without objcopy.
std::string fatbin_section(const std::string& so) {
  auto done = run_on_library(
      so, {"/bin/sh", "-c",
           "command -v objcopy >/dev/null || exit 0; objcopy -O binary --only-section=.nv_fatbin k.so k.fatbin"});
  auto fatbin = kiln::read_file(done->dir.path() + "/k.fatbin");
  return fatbin.is_ok() ? *fatbin : "";
}

}  // namespace

TEST_CASE("a CUDA candidate is built with nvcc and its resource usage read", "[compiler][cuda]") {
  CompilerOptions options;
  require_nvcc(options);
  Fixture f(options);
  auto req = twice_request(kTwiceKernel);
  auto out = f.handler->compile(req);
  REQUIRE(out.next.size() == 1);
  INFO(out.next[0].service);
  REQUIRE(out.next[0].service == "test.cuda");
  auto test = kiln::proto::decode<kiln::proto::TestRequest>(out.next[0].payload.data);
  REQUIRE(test.is_ok());
  const auto& b = test->build;
  INFO(b.log);
  CHECK(b.ok);
  CHECK(b.compiler == "nvcc");
  CHECK(b.flags.find("-gencode arch=compute_90,code=[sm_90,compute_90]") != std::string::npos);
  CHECK(b.flags.find("-cudart shared") != std::string::npos);
  CHECK(b.flags.find("-DBLOCK=256") != std::string::npos);
  CHECK(b.registers > 0);
  CHECK(b.shared_bytes == 256 * 4);
  CHECK(b.spill_bytes == 0);
  CHECK(b.toolchain.find("release") != std::string::npos);  // "Cuda compilation tools, release 13.0, V13.0.88"
}

TEST_CASE("the -gencode value embeds the target's machine code and its PTX", "[compiler][cuda]") {
  CHECK(kiln::compiler::cuda_gencode("sm_90") == "arch=compute_90,code=[sm_90,compute_90]");
  CHECK(kiln::compiler::cuda_gencode("sm_90a") == "arch=compute_90a,code=[sm_90a,compute_90a]");
  CHECK(kiln::compiler::cuda_gencode("sm_80") == "arch=compute_80,code=[sm_80,compute_80]");
}

// Every bundled CUDA task goes through nvcc here, also on machines without a GPU: program 0 with its
// default parameters, one other parameter combination, and the reference; ptxas's report must be read.
TEST_CASE("every bundled CUDA task's program 0 and reference build with nvcc", "[compiler][cuda]") {
  CompilerOptions options;
  require_nvcc(options);
  Fixture f(options);
  const std::map<std::string, std::map<std::string, std::string>> tasks = {
      {"cuda_rmsnorm", {{"BLOCK", "1024"}, {"VEC", "2"}}},
      {"cuda_softmax", {{"BLOCK", "128"}, {"VEC", "1"}}},
      {"cuda_sgemm", {{"BM", "64"}, {"BN", "128"}, {"BK", "16"}, {"TM", "4"}, {"TN", "8"}}},
      {"cuda_reduce_sum", {{"BLOCK", "512"}, {"VEC", "2"}, {"BLOCKS_PER_SM", "8"}}},
      {"cuda_transpose", {{"TILE", "64"}, {"BLOCK_ROWS", "16"}}},
  };
  for (const auto& [name, params] : tasks) {
    for (const bool with_params : {false, true}) {
      INFO(name << (with_params ? " with parameters" : " with defaults"));
      auto files = kiln::task::load_package(std::string(KILN_SOURCE_DIR "/configs/tasks/") + name);
      REQUIRE(files.is_ok());
      kiln::proto::CompileRequest req;
      req.cand.campaign_id = "c-" + name;
      req.cand.program_id = name + (with_params ? "/p1" : "/p0");
      req.cand.code = files->at("kernel.cu").data;
      if (with_params) req.cand.params = params;
      req.backend = kiln::proto::Backend::kCuda;
      req.arch = "sm_90";
      req.files = *files;
      auto out = f.handler->compile(req);
      REQUIRE(out.next.size() == 1);
      REQUIRE(out.next[0].service == "test.cuda");
      auto test = kiln::proto::decode<kiln::proto::TestRequest>(out.next[0].payload.data);
      REQUIRE(test.is_ok());
      INFO(test->build.log);
      CHECK(test->build.ok);
      CHECK(test->build.registers > 0);
      CHECK(test->build.spill_bytes == 0);
      CHECK(!test->kernel_so.data.empty());
      CHECK(!test->reference_so.data.empty());
    }
  }
}

// nvcc's steps run as a graph must build what nvcc builds: the same resource usage, the machine code and
// the PTX embedded where the CUDA tools (and the runtime) look for them.
TEST_CASE("a CUDA build as a graph of nvcc's steps matches nvcc's own", "[compiler][cuda][nvcc_graph]") {
  CompilerOptions graph;
  require_nvcc(graph);
  CompilerOptions serial = graph;
  serial.nvcc_mode = "serial";
  REQUIRE(graph.nvcc_mode == "graph");
  std::map<std::string, kiln::proto::TestRequest> built;
  for (const auto& options : {graph, serial}) {
    Fixture f(options);
    auto out = f.handler->compile(twice_request(kTwiceKernel));
    REQUIRE(out.next.size() == 1);
    auto test = kiln::proto::decode<kiln::proto::TestRequest>(out.next[0].payload.data);
    REQUIRE(test.is_ok());
    INFO(options.nvcc_mode << ": " << test->build.log);
    REQUIRE(test->build.ok);
    CHECK(f.counter("kiln_compile_nvcc_graph_fallbacks_total") == 0);
    CHECK(test->build.log.find("ptxas info") != std::string::npos);
    auto so = kiln::proto::kernel_library(*test, 64u << 20);
    REQUIRE(so.is_ok());
    const std::string images = embedded_images(options.nvcc, *so);
    if (!images.empty()) {
      CHECK(images.find("sm_90") != std::string::npos);
      CHECK(images.find(".ptx") != std::string::npos);
    }
    built[options.nvcc_mode] = *test;
  }
  const auto& g = built.at("graph").build;
  const auto& s = built.at("serial").build;
  CHECK(g.registers == s.registers);
  CHECK(g.shared_bytes == 256 * 4);
  CHECK(g.shared_bytes == s.shared_bytes);
  CHECK(g.spill_bytes == s.spill_bytes);
  CHECK(g.stack_bytes == s.stack_bytes);
  CHECK(g.flags == s.flags);
  // The same machine code and PTX, byte for byte: nvcc's section holds the kernel's fat binary after the
  // device link's (which the graph, with nothing to link, leaves out).
  const std::string graph_fatbin = fatbin_section(*kiln::proto::kernel_library(built.at("graph"), 64u << 20));
  const std::string serial_fatbin = fatbin_section(*kiln::proto::kernel_library(built.at("serial"), 64u << 20));
  if (!graph_fatbin.empty()) {
    CHECK(graph_fatbin.size() < serial_fatbin.size());
    CHECK(serial_fatbin.ends_with(graph_fatbin));
  }
  // Where the host toolchain has gold, the graph links with it (gold marks what it links); nvcc does not.
  if (std::system("g++ -fuse-ld=gold -Wl,--version >/dev/null 2>&1") == 0) {
    const std::string gold_note = ".note.gnu.gold-version";
    CHECK(kiln::proto::kernel_library(built.at("graph"), 64u << 20)->find(gold_note) != std::string::npos);
    CHECK(kiln::proto::kernel_library(built.at("serial"), 64u << 20)->find(gold_note) == std::string::npos);
  }
}

// A candidate that does not compile: the graph stops, nvcc runs it again and its report is the one kept.
TEST_CASE("a CUDA candidate that does not compile is reported in nvcc's words", "[compiler][cuda][nvcc_graph]") {
  CompilerOptions options;
  require_nvcc(options);
  Fixture f(options);
  std::string broken = kTwiceKernel;
  broken.replace(broken.find("y[i] = 2.f"), 10, "y[i] = 2.f * undefined_thing");
  auto out = f.handler->compile(twice_request(broken));
  auto score = score_of(out, "c3/p1");
  INFO(score.build.log);
  CHECK(!score.build.ok);
  CHECK(score.build.log.find("undefined_thing") != std::string::npos);
  CHECK(score.build.log.find("error") != std::string::npos);
  CHECK(score.build.process.returncode != 0);
  CHECK(f.counter("kiln_compile_nvcc_graph_fallbacks_total") == 1);
}

namespace {

kiln::proto::CompileRequest rmsnorm_cuda_request(const std::string& program_id,
                                                 std::map<std::string, std::string> params) {
  auto files = kiln::task::load_package(KILN_SOURCE_DIR "/configs/tasks/cuda_rmsnorm");
  REQUIRE(files.is_ok());
  kiln::proto::CompileRequest req;
  req.cand.campaign_id = "c1";
  req.cand.program_id = program_id;
  req.cand.code = files->at("kernel.cu").data;
  req.cand.params = std::move(params);
  req.backend = kiln::proto::Backend::kCuda;
  req.arch = "sm_90";
  req.files = *files;
  return req;
}

// Compiles the requests at once, one thread each (a compiler's slots), and returns their outcomes in order.
std::vector<kiln::messaging::JobOutcome> compile_together(CompileHandler& handler,
                                                          const std::vector<kiln::proto::CompileRequest>& reqs) {
  std::vector<kiln::messaging::JobOutcome> outs(reqs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < reqs.size(); ++i) threads.emplace_back([&, i] { outs[i] = handler.compile(reqs[i]); });
  for (auto& t : threads) t.join();
  return outs;
}

kiln::proto::BuildInfo built(const kiln::messaging::JobOutcome& out) {
  REQUIRE(out.next.size() == 1);
  REQUIRE(out.next[0].service == "test.cuda");
  auto test = kiln::proto::decode<kiln::proto::TestRequest>(out.next[0].payload.data);
  REQUIRE(test.is_ok());
  CHECK(!test->kernel_so.data.empty());
  return test->build;
}

}  // namespace

// rmsnorm's static shared memory is (BLOCK / 32 + 1) floats, so each variant's own ptxas report shows.
TEST_CASE("CUDA candidates of one source that arrive together are built as one batch", "[compiler][cuda][batch]") {
  CompilerOptions options;
  require_nvcc(options);
  options.batch_max = 3;
  options.batch_window_s = 10;  // the batch closes when the third arrives, long before
  options.batch_cores = 1;      // three builds in flight ask for more than one core: they batch on any machine
  // A batch runs as nvcc's steps in graph mode (each variant linking the graph's objects) and as nvcc
  // itself in serial mode.
  const std::string mode = GENERATE(std::string("graph"), std::string("serial"));
  INFO("nvcc_mode " << mode);
  options.nvcc_mode = mode;
  Fixture f(options);
  const std::vector<std::map<std::string, std::string>> params = {
      {{"BLOCK", "128"}, {"VEC", "8"}}, {{"BLOCK", "256"}, {"VEC", "4"}}, {{"BLOCK", "1024"}, {"VEC", "2"}}};
  std::vector<kiln::proto::CompileRequest> reqs;
  for (size_t i = 0; i < params.size(); ++i)
    reqs.push_back(rmsnorm_cuda_request("c1/p" + std::to_string(i), params[i]));
  auto outs = compile_together(*f.handler, reqs);
  for (size_t i = 0; i < outs.size(); ++i) {
    INFO("variant " << i << ": " << outs[i].error);
    const auto b = built(outs[i]);
    INFO(b.log);
    CHECK(b.ok);
    CHECK(b.log.find("built as variant ") != std::string::npos);
    CHECK(b.log.find(" of 3 in one translation unit") != std::string::npos);
    CHECK(b.shared_bytes == 4 * (std::stoi(params[i].at("BLOCK")) / 32 + 1));
    CHECK(b.registers > 0);
    CHECK(b.flags.find("-DBLOCK=" + params[i].at("BLOCK")) != std::string::npos);
  }
  CHECK(f.counter("kiln_compile_batched_builds_total") == 3);
  CHECK(f.counter("kiln_compile_batch_fallbacks_total") == 0);
  CHECK(f.counter("kiln_compile_nvcc_graph_fallbacks_total") == 0);

  // Asked again, each comes from the cache.
  const double hits = f.cache_hits();
  outs = compile_together(*f.handler, reqs);
  for (const auto& out : outs) CHECK(built(out).cache_hit);
  CHECK(f.cache_hits() == hits + 6);  // three kernels and three references
  CHECK(f.counter("kiln_compile_batched_builds_total") == 3);

  // A confirmation is built alone, whatever is in the cache: the same usage, nvcc's own log.
  auto confirm = rmsnorm_cuda_request("c1/p1", params[1]);
  confirm.purpose = kiln::proto::Purpose::kConfirm;
  const auto alone = built(f.handler->compile(confirm));
  INFO(alone.log);
  CHECK(!alone.cache_hit);
  CHECK(alone.log.find("built as variant") == std::string::npos);
  CHECK(alone.shared_bytes == 4 * (256 / 32 + 1));
  CHECK(f.counter("kiln_compile_batched_builds_total") == 3);
}

TEST_CASE("a batch that does not build is built again variant by variant", "[compiler][cuda][batch]") {
  CompilerOptions options;
  require_nvcc(options);
  options.batch_max = 3;
  options.batch_window_s = 10;
  options.batch_cores = 1;
  Fixture f(options);
  // VEC=3 makes alignas(6): that variant does not compile, and with it the batch.
  auto outs = compile_together(*f.handler, {rmsnorm_cuda_request("c1/p0", {{"BLOCK", "128"}, {"VEC", "8"}}),
                                            rmsnorm_cuda_request("c1/p1", {{"BLOCK", "256"}, {"VEC", "3"}}),
                                            rmsnorm_cuda_request("c1/p2", {{"BLOCK", "512"}, {"VEC", "2"}})});
  CHECK(f.counter("kiln_compile_batch_fallbacks_total") == 1);
  CHECK(f.counter("kiln_compile_batched_builds_total") == 0);
  for (size_t i : {0u, 2u}) {
    const auto b = built(outs[i]);
    INFO(b.log);
    CHECK(b.ok);
    CHECK(b.log.find("built as variant") == std::string::npos);
  }
  auto bad = score_of(outs[1], "c1/p1");
  CHECK(bad.error.find("error") != std::string::npos);
  CHECK(!bad.build.ok);
}

TEST_CASE("builds that fit the compiler's cores are built alone even when they arrive together",
          "[compiler][cuda][batch]") {
  CompilerOptions options;
  require_nvcc(options);
  options.batch_max = 3;
  options.batch_window_s = 10;
  options.batch_cores = 64;  // three builds of ~1.5 cores each fit
  Fixture f(options);
  // The two arrive within the window: had the first opened a batch, the second would have joined it and
  // both would count as batched builds (no clock needed to tell).
  auto outs = compile_together(*f.handler, {rmsnorm_cuda_request("c1/p0", {{"BLOCK", "128"}, {"VEC", "8"}}),
                                            rmsnorm_cuda_request("c1/p1", {{"BLOCK", "256"}, {"VEC", "4"}})});
  for (const auto& out : outs) {
    const auto b = built(out);
    INFO(b.log);
    CHECK(b.ok);
    CHECK(b.log.find("built as variant") == std::string::npos);
  }
  CHECK(f.counter("kiln_compile_batched_builds_total") == 0);
  CHECK(f.counter("kiln_compile_batch_fallbacks_total") == 0);
}

TEST_CASE("a compiler of one slot never batches, and the batch settings are checked", "[compiler][batch]") {
  kiln::config::CompilerConfig c;
  c.slots = 1;
  c.batch_max = 4;
  CHECK(kiln::compiler::options_from_config(c, "").batch_max == 1);
  c.slots = 4;
  c.batch_window_ms = 50;
  auto o = kiln::compiler::options_from_config(c, "");
  CHECK(o.batch_max == 4);
  CHECK(o.batch_window_s == Approx(0.05));
  CHECK(o.batch_cores == 0);
  c.batch_cores = 6;
  CHECK(kiln::compiler::options_from_config(c, "").batch_cores == 6);
  kiln::TempDir dir("kiln-compiler-test");
  o.cache_dir = dir.path();
  o.batch_max = 0;
  CHECK(!CompileHandler::create(o, nullptr).is_ok());
  o.batch_max = 4;
  o.batch_window_s = -1;
  CHECK(!CompileHandler::create(o, nullptr).is_ok());
  o.batch_window_s = 0.05;
  o.batch_cores = -1;
  CHECK(!CompileHandler::create(o, nullptr).is_ok());
}

namespace {

// The test request a CUDA build of `kernel` (twice_request's task) becomes, and the build it made.
kiln::proto::TestRequest built_test(Fixture& f, const kiln::proto::CompileRequest& req) {
  auto out = f.handler->compile(req);
  REQUIRE(out.next.size() == 1);
  REQUIRE(out.next[0].service == "test.cuda");
  auto test = kiln::proto::decode<kiln::proto::TestRequest>(out.next[0].payload.data);
  REQUIRE(test.is_ok());
  return *test;
}

// twice_request's kernel, its launch size worked out with std::min and std::numeric_limits in host code,
// after `includes`.
std::string kernel_naming_std(const std::string& includes, const std::string& extra) {
  std::string k = kTwiceKernel;
  k.insert(0, includes);
  k.replace(k.find("(n + BLOCK - 1) / BLOCK"), 23,
            "std::min<long>((n + BLOCK - 1) / BLOCK, std::numeric_limits<int>::max())" + extra);
  return k;
}

}  // namespace

// kiln/compiler/lean_headers.h: the device code of a lean build is that of a build with every header.
TEST_CASE("a lean CUDA build embeds the same machine code and PTX as a build with every header",
          "[compiler][cuda][lean]") {
  CompilerOptions lean;
  require_nvcc(lean);
  REQUIRE(lean.lean_headers);
  CompilerOptions full = lean;
  full.lean_headers = false;
  Fixture lean_fixture(lean);
  Fixture full_fixture(full);
  for (const char* name : {"cuda_rmsnorm", "cuda_sgemm", "cuda_reduce_sum"}) {
    INFO(name);
    auto files = kiln::task::load_package(std::string(KILN_SOURCE_DIR "/configs/tasks/") + name);
    REQUIRE(files.is_ok());
    kiln::proto::CompileRequest req;
    req.cand.campaign_id = std::string("c-") + name;
    req.cand.program_id = std::string(name) + "/p0";
    req.cand.code = files->at("kernel.cu").data;
    req.backend = kiln::proto::Backend::kCuda;
    req.arch = "sm_90";
    req.files = *files;
    const auto a = built_test(lean_fixture, req);
    const auto b = built_test(full_fixture, req);
    INFO(a.build.log << b.build.log);
    REQUIRE(a.build.ok);
    REQUIRE(b.build.ok);
    CHECK(a.build.flags.find("-D_GLIBCXX_BITS_SPECFUN_H") != std::string::npos);
    CHECK(a.build.flags.find("-include") == std::string::npos);  // nothing of std is named: no prelude
    CHECK(b.build.flags.find("SPECFUN") == std::string::npos);
    CHECK(a.build.registers == b.build.registers);
    CHECK(a.build.shared_bytes == b.build.shared_bytes);
    const std::string lean_fatbin = fatbin_section(*kiln::proto::kernel_library(a, 64u << 20));
    const std::string full_fatbin = fatbin_section(*kiln::proto::kernel_library(b, 64u << 20));
    CHECK(lean_fatbin == full_fatbin);
    if (!lean_fatbin.empty()) CHECK(lean_fatbin.find("sm_90") != std::string::npos);
  }
}

// What <bits/specfun.h> brought besides the special functions, a source that names std still finds.
TEST_CASE("a CUDA candidate that names std builds lean with the prelude and would not without it",
          "[compiler][cuda][lean]") {
  CompilerOptions options;
  require_nvcc(options);
  Fixture f(options);
  const std::string kernel = kernel_naming_std("", "");
  const auto test = built_test(f, twice_request(kernel));
  INFO(test.build.log);
  CHECK(test.build.ok);
  CHECK(test.build.flags.find("-D_GLIBCXX_BITS_SPECFUN_H -include kiln/lean_prelude.h") != std::string::npos);

  // The guard alone hides std::min and std::numeric_limits from it: the prelude is what keeps it building.
  kiln::TempDir dir("kiln-lean-test");
  REQUIRE(kiln::write_file_atomic(dir.path() + "/kernel.cu", kernel).is_ok());
  const std::string nvcc = options.nvcc + " -c -arch=sm_90 -I" KILN_SOURCE_DIR "/libs/core/include kernel.cu -o k.o";
  CHECK(std::system(("cd " + dir.path() + " && " + nvcc + " >/dev/null 2>&1").c_str()) == 0);
  CHECK(std::system(("cd " + dir.path() + " && " + nvcc + " -D_GLIBCXX_BITS_SPECFUN_H > log 2>&1").c_str()) != 0);
  auto log = kiln::read_file(dir.path() + "/log");
  REQUIRE(log.is_ok());
  CHECK(log->find("numeric_limits") != std::string::npos);
}

TEST_CASE("a CUDA candidate that calls a special function is built with every header", "[compiler][cuda][lean]") {
  CompilerOptions options;
  require_nvcc(options);
  Fixture f(options);
  const auto test =
      built_test(f, twice_request(kernel_naming_std("#include <cmath>\n", " + long(std::riemann_zeta(2.0) * 0)")));
  INFO(test.build.log);
  CHECK(test.build.ok);
  CHECK(test.build.flags.find("SPECFUN") == std::string::npos);
}
