// Several testers on one host (one per GPU on the cuda backend; here the CPU backend stands in): the
// bench/multigpu driver runs a campaign per task with two testers, SIGKILLs the one holding a test job,
// and must report every candidate scored exactly once, the broker's requeue and the supervisor's restart.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "process.h"

using namespace kiln::testing;
using nlohmann::json;

namespace {

// One run of the driver: two testers on the CPU backend, the one holding a test job SIGKILLed once a fifth
// of the candidates are scored.
ProcessResult run_with_a_kill() {
  return run_process({bin_dir() + "/kiln-bench-multigpu",
                      "--backend",
                      "cpu",
                      "--tasks",
                      source_dir() + "/tests/data/tasks",
                      "--testers",
                      "2",
                      "--kill-one",
                      "--kill-at",
                      "0.2",
                      "--budget",
                      "4",
                      "--compilers",
                      "2",
                      "--timing-min-time",
                      "0.05",
                      "--timing-max-time",
                      "0.5",
                      "--timeout",
                      "200"},
                     300);
}

}  // namespace

TEST_CASE("two testers, one killed mid-run: every candidate is scored exactly once", "[integration]") {
  // The driver kills the tester the broker's status shows holding a job; the status is a snapshot, so the
  // kill can land just after that job ended and requeue nothing. Such a run says nothing about the requeue:
  // the run is made again (at most three times), and the last one must show the kill landing mid-job.
  ProcessResult r;
  json out;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    r = run_with_a_kill();
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    out = json::parse(r.out);
    REQUIRE(out["runs"].size() == 1);
    const auto& run = out["runs"][0];
    REQUIRE(run["killed"].is_object());  // the kill happened
    if (run["requeued_test_jobs"].get<double>() >= 1) break;
    UNSCOPED_INFO("run " << attempt << ": the kill landed after the tester's job ended");
  }
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  const auto& run = out["runs"][0];
  CHECK(run["requeued_test_jobs"].get<double>() >= 1);  // ... while the tester held a job
  CHECK(run["testers"] == 2);
  CHECK(run["all_campaigns_done"] == true);
  CHECK(run["exactly_once"] == true);
  CHECK(run["candidates_scored"] == run["expected_candidates"]);
  CHECK(run["duplicate_results_ignored"] == 0);
  CHECK(run["supervisor_restarted_a_tester"] == true);
  for (const auto& c : run["campaigns"]) {
    INFO(c.dump());
    CHECK(c["programs"] == 5);
    CHECK(c["eval_results"] == 5);
    CHECK(c["scored_programs"] == 5);
  }
  CHECK(run["pipeline"]["test_jobs"].get<double>() > 0);  // where the time went: the broker's histograms
}
