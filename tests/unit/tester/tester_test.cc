#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <prometheus/registry.h>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "kiln/core/files.h"
#include "kiln/proto/codec.h"
#include "kiln/cuda/nvml.h"
#include "kiln/tester/handler.h"
#include "kiln/task/task.h"
#include "kiln/testing/test_status.h"

using kiln::messaging::Outcome;
using kiln::tester::TesterOptions;
using kiln::tester::TestHandler;
using status = kiln::proto::TestStatus;

namespace {

struct Fixture {
  kiln::TempDir dir{"kiln-tester-test"};
  kiln::proto::FileMap files;

  Fixture() {
    auto loaded = kiln::task::load_package(KILN_SOURCE_DIR "/configs/tasks/rmsnorm");
    REQUIRE(loaded.is_ok());
    files = *loaded;
  }

  // The package's kernel with its editable region replaced, compiled as the compiler would.
  std::string build(const std::string& name, const std::string& region = "", const std::string& prefix = "") {
    std::string code = files.at("kernel.cpp").data;
    if (!region.empty()) {
      auto replaced = kiln::task::replace_region(code, region);
      REQUIRE(replaced.is_ok());
      code = *replaced;
    }
    return compile(name, prefix + code);
  }

  std::string compile(const std::string& name, const std::string& code) {
    const std::string base = dir.path() + "/" + name;
    REQUIRE(kiln::write_file_atomic(base + ".cpp", code).is_ok());
    const std::string cmd = "g++ -O2 -march=native -fopenmp -shared -fPIC -std=c++17 -I" KILN_SOURCE_DIR
                            "/libs/core/include -o " +
                            base + ".so " + base + ".cpp";
    REQUIRE(std::system(cmd.c_str()) == 0);
    auto so = kiln::read_file(base + ".so");
    REQUIRE(so.is_ok());
    return *so;
  }

  // A folder for stand-ins of the evaluator: bound into the confined child, so anyone may read it.
  std::string bin_dir() {
    const std::string bin = dir.path() + "/bin";
    REQUIRE(kiln::make_dirs(bin).is_ok());
    REQUIRE(::chmod(bin.c_str(), 0755) == 0);
    return bin;
  }

  kiln::proto::TestRequest request(const std::string& kernel_so,
                                   kiln::proto::Purpose purpose = kiln::proto::Purpose::kEval) {
    kiln::proto::TestRequest req;
    req.cand.campaign_id = "c1";
    req.cand.program_id = "c1/p1";
    req.purpose = purpose;
    req.files = files;
    req.kernel_so.data = kernel_so;
    req.reference_so.data = compile("reference", files.at("reference.cpp").data);
    req.build.ok = true;
    req.build.flags = "-O2";
    return req;
  }
};

TesterOptions quick_options(double timeout_s = 60) {
  TesterOptions o;
  o.eval_binary = KILN_BINARY_DIR "/bin/kiln-eval";
  o.timeout_s = timeout_s;
  o.worker_id = "tester-test";
  o.timing.mode = "warm";
  o.timing.min_samples = 5;
  o.timing.min_time_s = 0.02;
  o.timing.max_time_s = 0.5;
  o.timing.warmup_iters = 1;
  return o;
}

std::unique_ptr<TestHandler> make(const TesterOptions& options = quick_options()) {
  auto h = TestHandler::create(options);
  INFO(h.status().to_string());
  REQUIRE(h.is_ok());
  return std::move(h).value();
}

kiln::messaging::JobOutcome handle(TestHandler& handler, const kiln::proto::TestRequest& req) {
  kiln::proto::Job job;
  job.job_id = "c1/p1:test";
  job.payload.data = kiln::proto::encode(req);
  return handler.handle(job);
}

// A job given back for a fault that is not the candidate's: nothing goes to the scorer.
std::string given_back(TestHandler& handler, const kiln::proto::TestRequest& req) {
  auto out = handle(handler, req);
  CHECK(out.outcome == Outcome::kRetry);
  CHECK(out.next.empty());
  return out.error;
}

// A job dead-lettered for a permanent fault that is not the candidate's: no verdict for the scorer.
std::string dead_lettered(TestHandler& handler, const kiln::proto::TestRequest& req) {
  auto out = handle(handler, req);
  CHECK(out.outcome == Outcome::kDeadLetter);
  CHECK(out.next.empty());
  return out.error;
}

// The verdict sent to the scorer: kDone for a kernel that passed, kCandidateFault for any other report.
kiln::proto::ScoreResult run_job(TestHandler& handler, const kiln::proto::TestRequest& req,
                                 const std::string& expected_job_id = "c1/p1:score") {
  auto out = handle(handler, req);
  INFO(out.error);
  REQUIRE((out.outcome == Outcome::kDone || out.outcome == Outcome::kCandidateFault));
  REQUIRE(out.next.size() == 1);
  CHECK(out.next[0].service == "score");
  CHECK(out.next[0].job_id == expected_job_id);
  auto score = kiln::proto::decode<kiln::proto::ScoreResult>(out.next[0].payload.data);
  REQUIRE(score.is_ok());
  CHECK(score->stage == kiln::proto::Stage::kTest);
  CHECK(score->cand.program_id == "c1/p1");
  CHECK(score->build.flags == "-O2");
  return *score;
}

}  // namespace

TEST_CASE("a correct kernel is evaluated by kiln-eval and scored", "[tester]") {
  Fixture f;
  auto handler = make();
  CHECK(handler->service() == "test.cpu");
  CHECK(handler->capabilities().backend == kiln::proto::Backend::kCpu);
  CHECK_FALSE(handler->capabilities().gpu_name.empty());

  auto score = run_job(*handler, f.request(f.build("correct")));
  INFO(score.test.message << "\n" << score.test.log);
  CHECK(score.purpose == kiln::proto::Purpose::kEval);
  CHECK(score.test.status == status::kOk);
  CHECK(score.test.correctness.passed);
  CHECK(score.test.performance.measured);
  CHECK(score.test.performance.mode == "warm");
  REQUIRE(score.test.performance.cases.size() == 1);
  CHECK(score.test.performance.cases[0].candidate.n >= 5);
  CHECK(score.test.worker.backend == kiln::proto::Backend::kCpu);
  CHECK(score.test.worker.worker_id == "tester-test");
  CHECK_FALSE(score.test.worker.device_name.empty());
  CHECK(score.test.duration_s > 0);
  // The child's run: it exited 0 (a report says what happened), and what it printed is there, apart.
  CHECK(score.test.process.returncode == 0);
  CHECK(score.test.process.message.empty());
  CHECK(handle(*handler, f.request(f.build("correct"))).outcome == Outcome::kDone);
  CHECK(kiln::proto::combined_output(score.test.process).find("kiln-eval: task 'rmsnorm'") != std::string::npos);
  // How it was measured, from the tester itself.
  const auto& m = score.test.metadata;
  CHECK(m.at("evaluator") == "kiln-eval");
  CHECK(m.at("evaluator_sha256").size() == 64);
  CHECK_FALSE(m.at("kiln_version").empty());
  CHECK(m.at("timing_mode") == "warm");
  CHECK(m.at("timing_min_samples") == "5");
  CHECK(m.at("timing_min_time_s") == "0.02");
  CHECK(m.at("timing_max_time_s") == "0.5");
  CHECK(m.at("timing_precision") == "0.01");
  CHECK(m.at("timeout_s") == "60");
  CHECK_FALSE(m.at("isolation_network").empty());
  CHECK_FALSE(m.at("isolation_pids").empty());
  CHECK_FALSE(m.at("isolation_filesystem").empty());
}

TEST_CASE("the child's output on the wire stays within the log cap", "[tester]") {
  Fixture f;
  TesterOptions o = quick_options();
  o.max_log_bytes = 120;
  auto handler = make(o);
  auto score = run_job(*handler, f.request(f.build("correct")));
  CHECK(score.test.status == status::kOk);
  const auto& p = score.test.process;
  // tail() marks a cut with one line of its own ("[... N bytes dropped]").
  CHECK(p.stdout_text.size() + p.stderr_text.size() <= 120 + 2 * 32);
  CHECK(p.stdout_text.size() + p.stderr_text.size() > 0);
}

TEST_CASE("a confirming measurement goes to its own score job", "[tester]") {
  Fixture f;
  auto handler = make();
  auto score = run_job(*handler, f.request(f.build("correct"), kiln::proto::Purpose::kConfirm), "c1/p1:score-confirm");
  CHECK(score.purpose == kiln::proto::Purpose::kConfirm);
  CHECK(score.test.status == status::kOk);
}

TEST_CASE("the campaign's bar screens a first measurement, never a confirmation", "[tester]") {
  Fixture f;
  TesterOptions o = quick_options();
  // Blocks of 20 ms: screening looks from the fifth block on, well before min_time ends the timing.
  o.timing.min_time_s = 0.2;
  o.timing.max_time_s = 2;
  o.timing.screen_below = 1.1;  // the tester's own bar (the promotion bar)
  auto handler = make(o);
  auto req = f.request(f.build("correct"));
  req.screen_below = 50;  // the campaign's best is 50x the reference: program 0 cannot get there
  auto first = run_job(*handler, req);
  INFO(first.test.message << "\n" << first.test.log);
  CHECK(first.test.status == status::kOk);
  REQUIRE(first.test.performance.cases.size() == 1);
  CHECK(first.test.performance.cases[0].stop_reason == "screened");
  CHECK(first.test.message.find("cannot reach 50x") != std::string::npos);
  CHECK(first.test.metadata.at("timing_screen_below") == "50");
  CHECK(first.test.metadata.at("timing_screen_by") == "campaign best");

  // Below the tester's own bar, the tester's bar holds.
  req.screen_below = 0.5;
  auto own = run_job(*handler, req);
  CHECK(own.test.metadata.at("timing_screen_below") == "1.1");
  CHECK(own.test.metadata.at("timing_screen_by") == "tester");

  // A confirmation is measured in full whatever the bar.
  req.screen_below = 50;
  req.purpose = kiln::proto::Purpose::kConfirm;
  auto confirm = run_job(*handler, req, "c1/p1:score-confirm");
  REQUIRE(confirm.test.performance.cases.size() == 1);
  CHECK(confirm.test.performance.cases[0].stop_reason != "screened");
  CHECK(confirm.test.metadata.count("timing_screen_below") == 0);

  // A screened-out candidate is not profiled; one measured in full is (scope "all").
  CHECK(kiln::tester::why_not_profiled(first.test) == "screened out on B=64,H=4096");
  CHECK(kiln::tester::why_not_profiled(confirm.test).empty());
  // Scope "contenders": not a confirmation, nor a candidate whose interval ends below the bar it ran under.
  using kiln::tester::ProfileChoice;
  CHECK(kiln::tester::why_not_profiled(first.test, {.scope = "contenders", .bar = 50}) ==
        "screened out on B=64,H=4096");
  CHECK(kiln::tester::why_not_profiled(confirm.test, {.scope = "contenders", .confirmation = true}) ==
        "a confirmation (its candidate was profiled when first measured)");
  const double hi = confirm.test.performance.cases[0].speedup_hi;
  CHECK(
      kiln::tester::why_not_profiled(confirm.test, {.scope = "contenders", .bar = hi * 1.01}).find("no contender: ") ==
      0);
  CHECK(kiln::tester::why_not_profiled(confirm.test, {.scope = "contenders", .bar = hi * 0.99}).empty());
  CHECK(kiln::tester::why_not_profiled(confirm.test, {.scope = "contenders", .bar = 0}).empty());
  CHECK(kiln::tester::why_not_profiled(confirm.test, {.scope = "contenders", .wanted = false}) ==
        "its proposer reads no profile");
  CHECK(kiln::tester::why_not_profiled(confirm.test, {.scope = "all", .confirmation = true, .wanted = false}).empty());

  // A bar that is not a number is the job's fault.
  req.purpose = kiln::proto::Purpose::kEval;
  req.screen_below = std::nan("");
  CHECK(dead_lettered(*handler, req).find("screen_below must be a finite number") != std::string::npos);
  req.screen_below = -1;
  CHECK(dead_lettered(*handler, req).find("screen_below must be a finite number") != std::string::npos);
}

TEST_CASE("SeenBars keeps per campaign the best lowest lower bound of correct first measurements in full", "[tester]") {
  auto report = [](std::vector<std::pair<double, const char*>> cases, kiln::proto::TestStatus st = status::kOk) {
    kiln::proto::TestReport r;
    r.status = st;
    r.performance.measured = true;
    for (const auto& [lo, stop] : cases) {
      kiln::proto::CaseTiming c;
      c.speedup_lo = lo;
      c.speedup = lo + 0.1;
      c.speedup_hi = lo + 0.2;
      c.stop_reason = stop;
      r.performance.cases.push_back(c);
    }
    return r;
  };
  kiln::tester::SeenBars bars(2);
  CHECK(bars.bar("c1") == 0);
  bars.record("c1", report({{2.0, "noise"}, {1.5, "max_time"}}));  // the lowest case counts
  CHECK(bars.bar("c1") == 1.5);
  bars.record("c1", report({{1.2, "noise"}}));  // a slower one does not lower it
  CHECK(bars.bar("c1") == 1.5);
  bars.record("c1", report({{9.0, "screened"}}));                  // a screened-out interval is partial
  bars.record("c1", report({{9.0, "noise"}}, status::kMismatch));  // a wrong kernel is no bar
  auto unmeasured = report({{9.0, "noise"}});
  unmeasured.performance.measured = false;  // not every case timed
  bars.record("c1", unmeasured);
  bars.record("", report({{9.0, "noise"}}));  // no campaign
  CHECK(bars.bar("c1") == 1.5);
  bars.record("c1", report({{3.0, "stalled"}}));
  CHECK(bars.bar("c1") == 3.0);
  CHECK(bars.bar("c2") == 0);  // campaigns apart
  // Bounded: the least recently used campaign goes first.
  bars.record("c2", report({{1.0, "noise"}}));
  CHECK(bars.bar("c1") == 3.0);  // c1 used last
  bars.record("c3", report({{1.0, "noise"}}));
  CHECK(bars.size() == 2);
  CHECK(bars.bar("c2") == 0);
  CHECK(bars.bar("c1") == 3.0);
}

TEST_CASE("a first measurement is screened against the campaign's best this tester measured since the proposal",
          "[tester]") {
  Fixture f;
  TesterOptions o = quick_options();
  o.timing.min_time_s = 0.2;
  o.timing.max_time_s = 2;
  auto handler = make(o);
  const auto fast = f.request(f.build("correct"));
  // The same result computed 30 times over: far slower than the first.
  const std::string body = R"(
  for (int rep = 0; rep < 30; ++rep) {
    asm volatile("" ::: "memory");
#pragma omp parallel for num_threads(THREADS) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      float sum = 0.f;
      for (int64_t c = 0; c < cols; ++c) sum += xr[c] * xr[c];
      const float inv = 1.f / std::sqrt(sum / static_cast<float>(cols) + eps);
      for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * inv * w[c];
    }
  }
)";
  auto slow = f.request(f.build("slow", body));
  REQUIRE(slow.screen_below == 0);  // proposed before anything of c1 was scored

  auto first = run_job(*handler, fast);
  REQUIRE(first.test.status == status::kOk);
  REQUIRE(first.test.performance.cases.size() == 1);
  REQUIRE(first.test.performance.cases[0].stop_reason != "screened");
  const double lo = first.test.performance.cases[0].speedup_lo;
  INFO("the first candidate's lower bound: " << lo);
  REQUIRE(lo > 0);

  auto second = run_job(*handler, slow);
  INFO(second.test.message << "\n" << second.test.log);
  CHECK(second.test.status == status::kOk);
  REQUIRE(second.test.performance.cases.size() == 1);
  CHECK(second.test.performance.cases[0].stop_reason == "screened");
  CHECK(second.test.metadata.at("timing_screen_by") == "campaign best measured here");
  CHECK(std::stod(second.test.metadata.at("timing_screen_below")) == Approx(lo).epsilon(1e-3));

  // Another campaign has learned nothing; a confirmation is measured in full.
  auto other = slow;
  other.cand.campaign_id = "c2";
  auto apart = run_job(*handler, other);
  REQUIRE(apart.test.performance.cases.size() == 1);
  CHECK(apart.test.performance.cases[0].stop_reason != "screened");
  auto confirm = slow;
  confirm.purpose = kiln::proto::Purpose::kConfirm;
  auto confirmed = run_job(*handler, confirm, "c1/p1:score-confirm");
  REQUIRE(confirmed.test.performance.cases.size() == 1);
  CHECK(confirmed.test.performance.cases[0].stop_reason != "screened");

  // Off: only the request's bar and the tester's.
  o.screen_by_best = false;
  auto off = make(o);
  run_job(*off, fast);
  auto unscreened = run_job(*off, slow);
  REQUIRE(unscreened.test.performance.cases.size() == 1);
  CHECK(unscreened.test.performance.cases[0].stop_reason != "screened");
  CHECK(unscreened.test.metadata.count("timing_screen_below") == 0);
}

TEST_CASE("split_cores gives each slot consecutive cores of its own", "[tester]") {
  using kiln::tester::split_cores;
  using Groups = std::vector<std::vector<int>>;
  CHECK(split_cores({0, 1, 2, 3, 4, 5, 6, 7}, 4) == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(split_cores({0, 1, 2, 3, 4}, 2) == Groups{{0, 1, 2}, {3, 4}});
  CHECK(split_cores({4, 5, 9}, 3) == Groups{{4}, {5}, {9}});
  CHECK(split_cores({0, 1, 2}, 1) == Groups{{0, 1, 2}});
  CHECK(split_cores({0}, 2).empty());  // fewer cores than slots: none pinned
  CHECK(split_cores({}, 1).empty());
  CHECK(split_cores({0, 1}, 0).empty());
}

TEST_CASE("CPU contestants run OpenMP with sleeping idle threads, one per slot core, bound there", "[tester]") {
  using kiln::tester::openmp_env;
  using Env = std::vector<std::string>;
  CHECK(openmp_env({2, 3}) == Env{"OMP_WAIT_POLICY=passive", "OMP_DYNAMIC=false", "OMP_NUM_THREADS=2",
                                  "OMP_PROC_BIND=close", "OMP_PLACES=cores"});
  // Unpinned: the team size and placement are OpenMP's own, but idle threads still sleep.
  CHECK(openmp_env({}) == Env{"OMP_WAIT_POLICY=passive", "OMP_DYNAMIC=false"});
}

TEST_CASE("with several slots the evaluations share the device's lock file and run at once", "[tester]") {
  Fixture f;
  TesterOptions o = quick_options();
  o.slots = 2;
  o.lock_dir = f.dir.path() + "/locks";
  auto handler = make(o);
  CHECK(handler->device_lock() == f.dir.path() + "/locks/device-cpu.lock");
  CHECK(::access(handler->device_lock().c_str(), F_OK) == 0);
  const auto req = f.request(f.build("correct"));
  // Two at once, as run_worker_service runs a handler with two slots.
  kiln::messaging::JobOutcome a, b;
  std::set<std::string> slots, slot_cores;
  std::thread other([&] { a = handle(*handler, req); });
  b = handle(*handler, req);
  other.join();
  for (const auto* out : {&a, &b}) {
    INFO(out->error);
    REQUIRE(out->outcome == Outcome::kDone);
    auto score = kiln::proto::decode<kiln::proto::ScoreResult>(out->next.at(0).payload.data);
    REQUIRE(score.is_ok());
    CHECK(score->test.status == status::kOk);
    CHECK(score->test.performance.measured);
    slots.insert(score->test.metadata["slot"]);
    slot_cores.insert(score->test.metadata["slot_cores"]);
  }
  // Each slot on cores of its own (this process may use at least two).
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  if (CPU_COUNT(&set) >= 2) {
    CHECK(slots == std::set<std::string>{"0", "1"});
    CHECK(slot_cores.size() == 2);
    CHECK(slot_cores.count("") == 0);
  } else {
    WARN("one core: the slots share it, unpinned");
  }
  // Without a folder for the lock, more than one slot is refused.
  o.lock_dir.clear();
  CHECK_FALSE(TestHandler::create(o).is_ok());
  // One slot: no lock.
  CHECK(make()->device_lock().empty());
}

TEST_CASE("a crashing kernel is a result and the tester keeps serving", "[tester]") {
  Fixture f;
  auto handler = make();
  auto crashed = run_job(*handler, f.request(f.build("null_deref", "  *(volatile int*)nullptr = 1;\n")));
  CHECK(crashed.test.status == status::kCrashed);
  CHECK(crashed.test.message == "crashed: SIGSEGV (B=1,H=4096 seed 0)");
  CHECK(crashed.test.log.find("kiln-eval: task 'rmsnorm'") != std::string::npos);
  CHECK_FALSE(crashed.test.worker.device_name.empty());

  auto fine = run_job(*handler, f.request(f.build("correct")));
  CHECK(fine.test.status == status::kOk);
}

TEST_CASE("the tester counts its evaluations by status and the time it spends on them", "[tester]") {
  Fixture f;
  auto handler = make();
  prometheus::Registry registry;
  handler->start_metrics(registry);
  auto value = [&](const std::string& family, const std::string& status) {
    for (const auto& fam : registry.Collect()) {
      if (fam.name != family) continue;
      for (const auto& m : fam.metric) {
        bool match = status.empty();
        for (const auto& l : m.label) match = match || (l.name == "status" && l.value == status);
        if (match) return m.counter.value;
      }
    }
    return -1.0;
  };
  CHECK(value("kiln_tester_evaluations_total", "ok") == 0);  // present before the first evaluation
  CHECK(value("kiln_tester_evaluations_total", "crashed") == 0);
  CHECK(value("kiln_tester_busy_seconds_total", "") == 0);
  CHECK(value("kiln_tester_timing_seconds_total", "") == 0);
  run_job(*handler, f.request(f.build("correct")));
  run_job(*handler, f.request(f.build("null_deref", "  *(volatile int*)nullptr = 1;\n")));
  auto req = f.request(f.build("correct"));
  req.reference_so.data = "this is not an ELF file";
  given_back(*handler, req);
  CHECK(value("kiln_tester_evaluations_total", "ok") == 1);
  CHECK(value("kiln_tester_evaluations_total", "crashed") == 1);
  CHECK(value("kiln_tester_evaluations_total", "error") == 1);
  CHECK(value("kiln_tester_busy_seconds_total", "") > 0.01);
  // The timing rounds of the one measured candidate: part of the time spent evaluating.
  CHECK(value("kiln_tester_timing_seconds_total", "") > 0);
  CHECK(value("kiln_tester_timing_seconds_total", "") < value("kiln_tester_busy_seconds_total", ""));
}

TEST_CASE("a kernel that never returns is timed out", "[tester]") {
  Fixture f;
  auto handler = make(quick_options(1));
  auto score = run_job(*handler, f.request(f.build("spin", "  volatile int spin = 1;\n  while (spin) {}\n")));
  CHECK(score.test.status == status::kTimedOut);
  CHECK(score.test.message == "timed out after 1 s");
  CHECK(score.test.duration_s < 10);
  CHECK(score.test.process.returncode == -SIGKILL);
  CHECK(score.test.process.message == "timed out after 1 s");
}

TEST_CASE("a kernel that exits the process is a result", "[tester]") {
  Fixture f;
  auto handler = make();
  auto score = run_job(*handler, f.request(f.build("exits", "  std::exit(3);\n", "#include <cstdlib>\n")));
  CHECK(score.test.status == status::kCrashed);
  CHECK(score.test.message == "crashed: exited with code 3 (B=1,H=4096 seed 0)");
}

TEST_CASE("a report the evaluator did not write is not believed", "[tester]") {
  // An "evaluation child" that writes a well-formed report saying ok, 50x, without the key: whatever puts
  // a report file in the scratch directory, only one authenticated with this evaluation's key counts.
  Fixture f;
  kiln::proto::TestReport forged;
  forged.status = status::kOk;
  forged.message = "correct; speedup 50x";
  forged.correctness.passed = true;
  forged.performance.measured = true;
  // The fake evaluator's folder is bound into the confined child, where the forged report is found beside it.
  const std::string bin = f.bin_dir();
  REQUIRE(kiln::write_file_atomic(bin + "/forged.msgpack", kiln::proto::encode(forged)).is_ok());
  REQUIRE(::chmod((bin + "/forged.msgpack").c_str(), 0644) == 0);
  const std::string script = bin + "/fake-eval";
  REQUIRE(kiln::write_file_atomic(script,
                                  "#!/bin/sh\ncp \"$(dirname \"$0\")/forged.msgpack\" result.msgpack\n"
                                  "echo 0000 > result.msgpack.mac\n")
              .is_ok());
  REQUIRE(::chmod(script.c_str(), 0755) == 0);
  TesterOptions o = quick_options();
  o.eval_binary = script;
  auto handler = make(o);
  auto score = run_job(*handler, f.request(f.build("correct")));
  CHECK(score.test.status == status::kCrashed);
  CHECK(score.test.message == "crashed: the result was not written by the evaluator (its authentication failed)");
}

TEST_CASE("the tester passes tester.timing.settle_calls to the evaluator and says so", "[tester]") {
  Fixture f;
  // The evaluator behind a script that says how it was called (a copy beside it: the folder is bound into
  // the confined child).
  const std::string bin = f.bin_dir();
  std::filesystem::copy_file(KILN_BINARY_DIR "/bin/kiln-eval", bin + "/kiln-eval");
  const std::string script = bin + "/argv-eval";
  REQUIRE(
      kiln::write_file_atomic(script, "#!/bin/sh\necho \"argv: $*\" >&2\nexec \"$(dirname \"$0\")/kiln-eval\" \"$@\"\n")
          .is_ok());
  REQUIRE(::chmod(script.c_str(), 0755) == 0);
  for (const int64_t settle : {0, 2}) {
    TesterOptions o = quick_options();
    o.eval_binary = script;
    o.timing.settle_calls = settle;
    auto handler = make(o);
    auto score = run_job(*handler, f.request(f.build("correct")));
    INFO(kiln::proto::combined_output(score.test.process));
    CHECK(score.test.status == status::kOk);
    CHECK(score.test.metadata.at("timing_settle_calls") == std::to_string(settle));
    // Always passed: 0 turns the evaluator's own default (settling) off.
    const std::string flag = "--settle-calls " + std::to_string(settle);
    CHECK(kiln::proto::combined_output(score.test.process).find(flag) != std::string::npos);
  }
}

TEST_CASE("a kernel that will not load is a load failure", "[tester]") {
  Fixture f;
  auto handler = make();
  auto score = run_job(*handler, f.request("this is not an ELF file"));
  CHECK(score.test.status == status::kLoadFailed);
  CHECK(score.test.message.rfind("cannot load the kernel", 0) == 0);

  const std::string without_entry = f.compile("no_entry", "extern \"C\" int not_the_entry() { return 0; }\n");
  auto no_entry = run_job(*handler, f.request(without_entry));
  CHECK(no_entry.test.status == status::kLoadFailed);
  CHECK(no_entry.test.message.find("no kiln_entry") != std::string::npos);
}

TEST_CASE("a reference that will not load or crashes is the evaluator's fault: the job is given back", "[tester]") {
  Fixture f;
  auto handler = make();
  auto req = f.request(f.build("correct"));
  req.reference_so.data = "this is not an ELF file";
  const std::string unloadable = given_back(*handler, req);
  CHECK(unloadable.rfind("test: the evaluator could not evaluate: cannot load the reference: ", 0) == 0);

  req.reference_so.data = f.compile("crashing_reference",
                                    "#include \"kiln/kernel_abi.h\"\n"
                                    "extern \"C\" KILN_EXPORT int kiln_entry(const kiln_args*) {\n"
                                    "  *(volatile int*)nullptr = 1;\n  return 0;\n}\n");
  const std::string crashed = given_back(*handler, req);
  CHECK(crashed.rfind("test: the evaluator could not evaluate: evaluation: ", 0) == 0);
  CHECK(crashed.find("reference") != std::string::npos);
  CHECK(crashed.find("SIGSEGV") != std::string::npos);
}

// The three kinds of fault, each with its one outcome: only the candidate's own is scored against it.
TEST_CASE("a transient fault is given back, a permanent one dead-lettered, only the candidate's scored", "[tester]") {
  Fixture f;
  // This worker's fault: its evaluation child is gone (a broken install, a full disk). Given back.
  const std::string evaluator = f.bin_dir() + "/kiln-eval";
  std::filesystem::copy_file(KILN_BINARY_DIR "/bin/kiln-eval", evaluator);
  TesterOptions o = quick_options();
  o.eval_binary = evaluator;
  auto handler = make(o);
  const auto correct = f.request(f.build("correct"));
  REQUIRE(::unlink(evaluator.c_str()) == 0);
  const std::string gone = given_back(*handler, correct);
  INFO(gone);
  CHECK(gone.rfind("test: tester: evaluation child: ", 0) == 0);
  std::filesystem::copy_file(KILN_BINARY_DIR "/bin/kiln-eval", evaluator);  // the next attempt
  CHECK(handle(*handler, correct).outcome == Outcome::kDone);

  // Permanent and not the candidate's: a job for a task of another backend. Never scored.
  auto cuda = correct;
  cuda.files["task.yaml"].data.replace(cuda.files["task.yaml"].data.find("backend: cpu"), 12, "backend: cuda");
  cuda.files["kernel.cu"] = cuda.files.at("kernel.cpp");
  cuda.files["reference.cu"] = cuda.files.at("reference.cpp");
  const std::string why = dead_lettered(*handler, cuda);
  INFO(why);
  CHECK(why.find("the task's backend is cuda") != std::string::npos);

  // The candidate's own: it computes the wrong values. Scored against it.
  auto wrong = handle(*handler, f.request(f.build("wrong", "  return 0;\n")));
  CHECK(wrong.outcome == Outcome::kCandidateFault);
  REQUIRE(wrong.next.size() == 1);
  auto score = kiln::proto::decode<kiln::proto::ScoreResult>(wrong.next[0].payload.data);
  REQUIRE(score.is_ok());
  CHECK(score->test.status != status::kOk);
  CHECK(wrong.error.rfind("test: ", 0) == 0);
}

TEST_CASE("a tester without torch gives a PyTorch-reference job back with the reason, never scores it", "[tester]") {
  Fixture f;
  TesterOptions o = quick_options();
  o.python_config = "off";
  auto handler = make(o);
  auto torch = f.request(f.build("correct"));
  torch.files.erase("reference.cpp");
  torch.files["reference.py"] = kiln::proto::Bytes{"import torch\n"};
  const std::string why = given_back(*handler, torch);
  INFO(why);
  CHECK(why.find("the task runs a PyTorch module (reference.py)") != std::string::npos);
  CHECK(why.find("tester.python is off") != std::string::npos);
}

TEST_CASE("bad requests and unsupported setups are refused", "[tester]") {
  auto handler = make();
  kiln::proto::Job junk;
  junk.payload.data = "junk";
  auto out = handler->handle(junk);
  CHECK(out.outcome == Outcome::kDeadLetter);
  CHECK(out.error.rfind("test: bad TestRequest", 0) == 0);

  // A task package that does not parse is no fault of the candidate, and no attempt can read it.
  Fixture f;
  auto req = f.request("x");
  req.files.erase("task.yaml");
  CHECK(dead_lettered(*handler, req).rfind("test: tester: task: ", 0) == 0);

  auto cuda = quick_options();
  cuda.backend = kiln::proto::Backend::kCuda;
  CHECK_FALSE(TestHandler::create(cuda).is_ok());
  auto missing = quick_options();
  missing.eval_binary = "/nonexistent/kiln-eval";
  CHECK_FALSE(TestHandler::create(missing).is_ok());
}

TEST_CASE("a cuda tester without a GPU refuses to start, naming why, so it never registers for test.cuda",
          "[tester][cuda]") {
  if (kiln::cuda::Nvml::load().is_ok()) {
    WARN("NVML answers on this machine: the no-GPU path is not exercised here");
    return;
  }
  TesterOptions cuda;
  cuda.backend = kiln::proto::Backend::kCuda;
  // The CUDA evaluation child, when this build has one; else any executable: the GPU check must still fail.
  cuda.eval_binary = access(KILN_BINARY_DIR "/bin/kiln-eval-cuda", X_OK) == 0 ? KILN_BINARY_DIR "/bin/kiln-eval-cuda"
                                                                              : KILN_BINARY_DIR "/bin/kiln-eval";
  auto handler = TestHandler::create(cuda);
  REQUIRE_FALSE(handler.is_ok());
  CHECK(handler.status().message().find("no usable GPU") != std::string::npos);
}

TEST_CASE("the evaluation child is chosen by backend", "[tester][cuda]") {
  auto cpu = kiln::tester::default_eval_binary(kiln::proto::Backend::kCpu);
  auto cuda = kiln::tester::default_eval_binary(kiln::proto::Backend::kCuda);
  REQUIRE(cpu.is_ok());
  REQUIRE(cuda.is_ok());
  CHECK(cpu->size() > 9);
  CHECK(cpu->substr(cpu->size() - 9) == "kiln-eval");
  CHECK(cuda->substr(cuda->size() - 14) == "kiln-eval-cuda");
}

TEST_CASE("tester.slots 0 is four evaluations at once on a GPU and one on the CPU", "[tester]") {
  kiln::config::TesterConfig c;
  CHECK(c.slots == 0);
  c.backend = "cuda";
  auto cuda = kiln::tester::options_from_config(c);
  REQUIRE(cuda.is_ok());
  CHECK(cuda->slots == kiln::config::kDefaultCudaSlots);
  c.backend = "cpu";
  auto cpu = kiln::tester::options_from_config(c);
  REQUIRE(cpu.is_ok());
  CHECK(cpu->slots == 1);
  c.backend = "cuda";
  c.slots = 2;
  auto two = kiln::tester::options_from_config(c);
  REQUIRE(two.is_ok());
  CHECK(two->slots == 2);
}
