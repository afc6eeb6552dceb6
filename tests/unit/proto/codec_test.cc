#include <catch2/catch.hpp>

#include <string>

#include "kiln/core/files.h"
#include "kiln/proto/payloads.h"
#include "kiln/proto/wire.h"
#include "kiln/testing/test_status.h"

using namespace kiln::proto;

namespace {
std::string golden(const std::string& name) {
  auto r = kiln::read_file(std::string(KILN_SOURCE_DIR) + "/proto-msgs/golden/" + name + ".msgpack");
  REQUIRE(r.is_ok());
  return *r;
}

struct Extended {  // a newer writer: same keys plus one the old reader does not know
  std::string job_id;
  std::string brand_new;
  template <class V>
  void fields(V& v) {
    v("job_id", job_id);
    v("brand_new", brand_new);
  }
};
struct WrongType {
  int64_t job_id = 7;
  template <class V>
  void fields(V& v) {
    v("job_id", job_id);
  }
};
}  // namespace

TEST_CASE("messages round-trip", "[proto]") {
  ResultMsg r;
  r.job_id = "c/p1:test";
  r.attempt = 3;
  r.outcome = "retry";
  r.error = "worker lost";
  r.payload = Bytes{std::string("\0\1\2", 3)};
  r.next.push_back(FollowUp{"score", "c/p1:score", Bytes{"x"}, 5});
  r.next.push_back(FollowUp{"promote", "c/p1:promote", Bytes{"y"}, 0});
  auto d = decode<ResultMsg>(encode(r));
  REQUIRE(d.is_ok());
  CHECK(d->job_id == r.job_id);
  CHECK(d->attempt == 3);
  CHECK(d->payload == r.payload);
  REQUIRE(d->next.size() == 2);
  CHECK(d->next[1].service == "promote");
  CHECK(d->next[0].timeout_s == 5);
}

TEST_CASE("golden samples decode", "[proto]") {
  auto ready = decode<Ready>(golden("ready"));
  REQUIRE(ready.is_ok());
  CHECK(ready->service == "compile");
  CHECK(ready->slots == 2);
  CHECK(ready->caps.toolchain == "g++ 12.2.0");

  auto job = decode<Job>(golden("job"));
  REQUIRE(job.is_ok());
  CHECK(job->attempt == 2);
  CHECK(job->payload.data == "\x01\x02payload");

  auto res = decode<ResultMsg>(golden("result"));
  REQUIRE(res.is_ok());
  REQUIRE(res->next.size() == 1);
  CHECK(res->next[0].job_id == "c1/p3:test");

  auto sr = decode<ScoreResult>(golden("score_result"));
  REQUIRE(sr.is_ok());
  CHECK(sr->kind == "result");
  CHECK(sr->cand.params.at("VEC") == "4");
  REQUIRE(sr->test.performance.cases.size() == 1);
  CHECK(sr->test.performance.cases[0].speedup == Approx(4.0));
  CHECK(sr->test.performance.cases[0].dims.at("H") == 4096);

  auto cs = decode<CampaignStart>(golden("campaign_start"));
  REQUIRE(cs.is_ok());
  CHECK(cs->files.at("task.yaml").data == "name: rmsnorm\n");
  CHECK(peek_string(golden("campaign_start"), "kind").value() == "campaign.start");

  auto sr2 = decode<ScoreResult>(golden("score_result_v2"));
  REQUIRE(sr2.is_ok());
  CHECK(Reader::parse(golden("score_result_v2"))->version() == 2);
  REQUIRE(sr2->test.performance.cases.size() == 2);
  CHECK(sr2->test.performance.cases[1].dims.at("B") == 64);
  CHECK(sr2->test.performance.cases[1].speedup_lo == Approx(0.45));
  CHECK(sr2->build.process.stderr_text == "ptxas info: Used 32 registers\n");
  CHECK(sr2->test.process.returncode == 0);
  CHECK(sr2->test.metadata.at("evaluator") == "kiln-eval");
  CHECK(sr2->cand.raw_llm_code.find("[EVOLVE_START]") != std::string::npos);

  auto dl = decode<DeadLetter>(golden("dead_letter"));
  REQUIRE(dl.is_ok());
  CHECK(dl->attempts == 3);
  CHECK(decode<Submit>(golden("submit")).is_ok());
}

TEST_CASE("old readers ignore unknown keys", "[proto]") {
  auto d = decode<JobStatusQuery>(encode(Extended{"j1", "surprise"}));
  REQUIRE(d.is_ok());
  CHECK(d->job_id == "j1");
}

TEST_CASE("malformed frames are rejected with a reason, never a crash", "[proto]") {
  CHECK_FALSE(decode<Job>("").is_ok());
  CHECK_FALSE(decode<Job>("\xc1").is_ok());          // never-used byte
  CHECK_FALSE(decode<Job>("\x92\x01\x02").is_ok());  // an array, not a map
  CHECK_FALSE(decode<Job>("\x81\xa1v").is_ok());     // truncated
  std::string good = encode(Job{"j", 1, "s", {}, 0});
  auto trailing = decode<Job>(good + "x");
  REQUIRE_FALSE(trailing.is_ok());
  CHECK(trailing.status().message().find("trailing") != std::string::npos);
  auto wrong = decode<JobStatusQuery>(encode(WrongType{}));
  REQUIRE_FALSE(wrong.is_ok());
  CHECK(wrong.status().message().find("job_id") != std::string::npos);

  DecodeLimits small;
  small.max_frame_bytes = 16;
  CHECK_FALSE(decode<Job>(encode(Job{"a-long-job-identifier", 1, "svc", {}, 0}), small).is_ok());

  // A map claiming 2^32-1 entries with nothing behind it.
  CHECK_FALSE(decode<Job>(std::string("\xdf\xff\xff\xff\xff", 5)).is_ok());
  // Deep nesting beyond the depth limit.
  std::string deep(100, '\x91');
  CHECK_FALSE(decode<Job>(deep + "\x01").is_ok());
}

TEST_CASE("random bytes never crash the decoder", "[proto]") {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  std::string good = encode(ResultMsg{"j", 1, "ok", Bytes{"p"}, "", {FollowUp{"a", "b", Bytes{"c"}, 1}}});
  for (int i = 0; i < 5000; ++i) {
    std::string m = good;
    for (int k = 0; k < 3; ++k) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      m[s % m.size()] = static_cast<char>(s >> 32);
    }
    (void)decode<ResultMsg>(m);  // must return, either way
  }
  SUCCEED();
}

TEST_CASE("process results travel with builds and test reports", "[proto]") {
  ScoreResult sr;
  sr.stage = Stage::kTest;
  sr.build.ok = true;
  sr.build.process = ProcessResult{0, "", "ptxas info: Used 32 registers\n", ""};
  sr.test.status = TestStatus::kCrashed;
  sr.test.process = ProcessResult{-11, "case 1 ok\n", "runner: fault\n", "killed by SIGSEGV"};
  auto d = decode<ScoreResult>(encode(sr));
  REQUIRE(d.is_ok());
  CHECK(d->build.process.returncode == 0);
  CHECK(d->build.process.stderr_text == "ptxas info: Used 32 registers\n");
  CHECK(d->test.process.returncode == -11);
  CHECK(d->test.process.stdout_text == "case 1 ok\n");
  CHECK(d->test.process.stderr_text == "runner: fault\n");
  CHECK(d->test.process.message == "killed by SIGSEGV");

  // A report from a writer before ProcessResult: no process, which reads as "nothing known".
  auto old = decode<ScoreResult>(golden("score_result"));
  REQUIRE(old.is_ok());
  CHECK(old->test.process.returncode == 0);
  CHECK(old->test.process.stdout_text.empty());
  CHECK(old->build.process.message.empty());
}

TEST_CASE("a process result combines its output and merges with others", "[proto]") {
  ProcessResult build{1, "compiling\n", "x.cpp:3: error: nope", "exit code 1"};
  CHECK(combined_output(build) == "exit code 1\ncompiling\nx.cpp:3: error: nope\n");
  CHECK(combined_output(build, false) == "compiling\nx.cpp:3: error: nope\n");
  CHECK(combined_output(ProcessResult{}).empty());

  ProcessResult ok{0, "done\n", "", ""};
  ProcessResult killed{-9, "", "partial\n", "timed out after 30 s"};
  ProcessResult merged = merge({{"a_reference", ok}, {"b_kernel", build}, {"c_eval", killed}});
  CHECK(merged.returncode == 1);  // the first failure in key order
  CHECK(merged.stdout_text == "=== a_reference ===\ndone\n=== b_kernel ===\ncompiling\n");
  CHECK(merged.stderr_text == "=== b_kernel ===\nx.cpp:3: error: nope\n=== c_eval ===\npartial\n");
  CHECK(merged.message == "b_kernel: exit code 1\nc_eval: timed out after 30 s");

  CHECK(merge({{"a", ok}, {"b", ok}}).returncode == 0);
  CHECK(merge({{"a", ok}, {"b", killed}}).returncode == -9);
  ProcessResult none = merge({});
  CHECK(none.returncode == 0);
  CHECK(combined_output(none).empty());
}

TEST_CASE("two streams share a log budget", "[proto]") {
  using Budget = std::pair<size_t, size_t>;
  CHECK(stream_budgets(10, 20, 100) == Budget{10, 20});   // both fit
  CHECK(stream_budgets(0, 500, 100) == Budget{0, 100});   // one stream takes it all
  CHECK(stream_budgets(30, 500, 100) == Budget{30, 70});  // the short one keeps all it has
  CHECK(stream_budgets(500, 10, 100) == Budget{90, 10});
  CHECK(stream_budgets(500, 500, 101) == Budget{50, 51});  // half each
}

TEST_CASE("the envelope says version 3, and version-1 messages still decode", "[proto]") {
  auto parsed = Reader::parse(encode(Job{"j", 1, "s", {}, 0}));
  REQUIRE(parsed.is_ok());
  CHECK(parsed->version() == 3);
  auto old = Reader::parse(golden("job"));
  REQUIRE(old.is_ok());
  CHECK(old->version() == 1);
  CHECK(decode<Job>(golden("job")).is_ok());
}

namespace {
// A TestRequest as written before schema 3.
struct OldTestRequest {
  Candidate cand;
  std::string purpose = "eval";
  FileMap files;
  Bytes kernel_so, reference_so;
  template <class V>
  void fields(V& v) {
    v("cand", cand);
    v("purpose", purpose);
    v("files", files);
    v("kernel_so", kernel_so);
    v("reference_so", reference_so);
  }
};
}  // namespace

TEST_CASE("a job names its task package and reference by blob, and an older job that carries them still decodes",
          "[proto]") {
  TestRequest named;
  named.task_blob = std::string(64, 'a');
  named.reference_blob = std::string(64, 'b');
  named.kernel_so = Bytes{"so"};
  auto back = decode<TestRequest>(encode(named));
  REQUIRE(back.is_ok());
  CHECK(back->files.empty());
  CHECK(back->task_blob == named.task_blob);
  CHECK(back->reference_blob == named.reference_blob);
  // A request from before schema 3: no blob keys, the package inline.
  OldTestRequest old;
  old.files["task.yaml"] = Bytes{"name: t"};
  old.reference_so = Bytes{"ref"};
  auto from_old = decode<TestRequest>(encode(old));
  REQUIRE(from_old.is_ok());
  CHECK(from_old->task_blob.empty());
  CHECK(from_old->files.at("task.yaml").data == "name: t");
  CHECK(from_old->reference_so.data == "ref");
}

TEST_CASE("a kernel library travels deflated and comes back as built, and a request that lies about it is refused",
          "[proto]") {
  std::string so(16384, '\0');
  so.replace(0, 4,
             "\x7f"
             "ELF");
  TestRequest req;
  set_kernel_library(req, so);
  CHECK(req.kernel_so_encoding == "deflate");
  CHECK(req.kernel_so.data.size() < so.size() / 4);
  auto back = decode<TestRequest>(encode(req));
  REQUIRE(back.is_ok());
  CHECK(kernel_library(*back, 1 << 20).value() == so);
  CHECK_FALSE(kernel_library(*back, 4096).is_ok());  // bounded before inflating

  TestRequest lying = *back;
  lying.kernel_so_size = 100;
  CHECK_FALSE(kernel_library(lying, 1 << 20).is_ok());
  lying.kernel_so_size = -1;
  CHECK_FALSE(kernel_library(lying, 1 << 20).is_ok());
  lying = *back;
  lying.kernel_so_encoding = "gzip";
  CHECK_FALSE(kernel_library(lying, 1 << 20).is_ok());

  // Content deflate cannot shrink goes as it is; so does a request from before schema 3.
  TestRequest tiny;
  set_kernel_library(tiny, "ab");
  CHECK(tiny.kernel_so_encoding.empty());
  CHECK(kernel_library(tiny, 10).value() == "ab");
}

TEST_CASE("per-case numbers round-trip", "[proto]") {
  BestPrograms best;
  Program p;
  p.id = "c1/p2";
  CaseSpeedup a;
  a.dims = {{"B", 16}, {"H", 4096}};
  a.speedup = 4.0;
  a.speedup_lo = 3.8;
  a.speedup_hi = 4.2;
  a.median_us = 10;
  a.reference_median_us = 40;
  a.n = 30;
  CaseSpeedup b = a;
  b.dims = {{"B", 64}, {"H", 4096}};
  b.speedup = 0.5;
  p.eval.cases = {a, b};
  best.programs.push_back(p);
  auto d = decode<BestPrograms>(encode(best));
  REQUIRE(d.is_ok());
  REQUIRE(d->programs.size() == 1);
  const Program& q = d->programs[0];
  REQUIRE(q.eval.cases.size() == 2);
  CHECK(q.eval.cases[1].dims.at("B") == 64);
  CHECK(q.eval.cases[1].speedup == Approx(0.5));
  CHECK(q.eval.cases[0].speedup_lo == Approx(3.8));
  CHECK(q.eval.cases[0].reference_median_us == Approx(40));
  CHECK(q.eval.cases[0].n == 30);

  PromoteRequest req;
  req.benchmark_cases.resize(2);
  req.benchmark_cases[1].dims = {{"B", 64}};
  req.confirmation_cases.resize(2);
  req.confirmation_cases[1].speedup = 1.3;
  auto r = decode<PromoteRequest>(encode(req));
  REQUIRE(r.is_ok());
  REQUIRE(r->benchmark_cases.size() == 2);
  CHECK(r->benchmark_cases[1].dims.at("B") == 64);
  CHECK(r->confirmation_cases.at(1).speedup == Approx(1.3));
}

TEST_CASE("the programs' added fields round-trip", "[proto]") {
  BestPrograms best;
  Program p;
  p.id = "c1/p2";
  p.complexity = 12;
  p.diversity = 0.25;
  p.task = TaskRef{"00ff", "rmsnorm", "rmsnorm", Backend::kCpu, "fp32"};
  p.raw_llm_code = "Here it is:\n```cpp\nint x;\n```\n";
  p.eval.template_results = {{"BLOCK=64", 6.5}, {"BLOCK=128", 5.9}};
  p.eval.metadata = {{"evaluator", "kiln-eval"}, {"device", "AMD EPYC"}};
  best.programs.push_back(p);
  auto d = decode<BestPrograms>(encode(best));
  REQUIRE(d.is_ok());
  REQUIRE(d->programs.size() == 1);
  const Program& q = d->programs[0];
  CHECK(q.complexity == 12);
  CHECK(q.diversity == Approx(0.25));
  CHECK(q.task.task_id == "00ff");
  CHECK(q.task.backend == Backend::kCpu);
  CHECK(q.raw_llm_code == p.raw_llm_code);
  CHECK(q.eval.template_results == p.eval.template_results);
  CHECK(q.eval.metadata == p.eval.metadata);

  ScoreResult sr;
  sr.cand.raw_llm_code = "raw";
  sr.test.metadata = {{"timing_mode", "cold"}};
  auto s = decode<ScoreResult>(encode(sr));
  REQUIRE(s.is_ok());
  CHECK(s->cand.raw_llm_code == "raw");
  CHECK(s->test.metadata.at("timing_mode") == "cold");
}
