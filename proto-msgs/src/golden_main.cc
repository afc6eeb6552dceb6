// Writes the golden sample of each message into a folder. The samples in proto-msgs/golden/ are
// committed; tests decode them, so a change that breaks old readers fails a test. Each committed sample is
// what the Kiln of its time wrote (the envelope version inside says which): write into an empty folder and
// copy only a new sample over, never regenerate the old ones.
#include <cstdio>
#include <string>

#include "kiln/core/files.h"
#include "kiln/proto/payloads.h"
#include "kiln/proto/wire.h"

namespace {

using namespace kiln::proto;

int write(const std::string& dir, const std::string& name, const std::string& bytes) {
  auto st = kiln::write_file_atomic(dir + "/" + name + ".msgpack", bytes);
  if (!st.is_ok()) {
    std::fprintf(stderr, "kiln-proto-golden: %s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kiln-proto-golden DIR\n");
    return 2;
  }
  std::string dir = argv[1];
  int rc = 0;

  Ready ready{"compile", "compiler-host-1234", 2, {Backend::kCpu, "", "", "x86_64", "g++ 12.2.0", "host"}};
  rc |= write(dir, "ready", encode(ready));

  Job job{"c1/p3:compile", 2, "compile", Bytes{"\x01\x02payload"}, 1764428000.5};
  rc |= write(dir, "job", encode(job));

  ResultMsg res;
  res.job_id = "c1/p3:compile";
  res.attempt = 2;
  res.outcome = "ok";
  res.next.push_back(FollowUp{"test.cpu", "c1/p3:test", Bytes{"abc"}, 300});
  rc |= write(dir, "result", encode(res));

  Submit sub{"ingest", "ingest:c1", Bytes{"task"}, 60};
  rc |= write(dir, "submit", encode(sub));

  Candidate cand;
  cand.campaign_id = "c1";
  cand.program_id = "c1/p3";
  cand.parent_id = "c1/p0";
  cand.generation = 1;
  cand.proposal_index = 3;
  cand.proposer = "tuner";
  cand.code = "// kernel\n";
  cand.params = {{"BLOCK", "256"}, {"VEC", "4"}};

  ScoreResult sr;
  sr.cand = cand;
  sr.stage = Stage::kTest;
  sr.build.ok = true;
  sr.build.compiler = "g++";
  sr.test.status = TestStatus::kOk;
  sr.test.correctness.passed = true;
  sr.test.correctness.max_abs_error = 1.5e-7;
  sr.test.correctness.tested_shapes = {"B=1,H=4096", "B=16,H=4097"};
  CaseTiming ct;
  ct.dims = {{"B", 16}, {"H", 4096}};
  ct.candidate.n = 40;
  ct.candidate.median_us = 12.5;
  ct.reference.n = 40;
  ct.reference.median_us = 50.0;
  ct.speedup = 4.0;
  ct.speedup_lo = 3.8;
  ct.speedup_hi = 4.2;
  sr.test.performance.measured = true;
  sr.test.performance.method = "host_clock";
  sr.test.performance.mode = "cold";
  sr.test.performance.cases.push_back(ct);
  rc |= write(dir, "score_result", encode(sr));

  // Envelope version 2 (codec.h): two benchmark cases, the processes that ran, how it was measured and an
  // LLM's raw reply. The samples above were written by version 1 and are kept as they were.
  ScoreResult sr2 = sr;
  sr2.cand.raw_llm_code = "Here it is:\n```cpp\n// [EVOLVE_START]\n// [EVOLVE_END]\n```\n";
  CaseTiming big = ct;
  big.dims = {{"B", 64}, {"H", 4096}};
  big.speedup = 0.5;
  big.speedup_lo = 0.45;
  big.speedup_hi = 0.55;
  sr2.test.performance.cases.push_back(big);
  sr2.build.process = ProcessResult{0, "", "ptxas info: Used 32 registers\n", ""};
  sr2.test.process = ProcessResult{0, "", "kiln-eval: task 'rmsnorm'\n", ""};
  sr2.test.metadata = {{"evaluator", "kiln-eval"}, {"timing_mode", "cold"}};
  rc |= write(dir, "score_result_v2", encode(sr2));

  CampaignStart cs;
  cs.campaign_id = "c1";
  cs.task_id = "00ff";
  cs.task_name = "rmsnorm";
  cs.budget = 8;
  cs.files = {{"task.yaml", Bytes{"name: rmsnorm\n"}}};
  rc |= write(dir, "campaign_start", encode(cs));

  DeadLetter dl;
  dl.job_id = "c1/p3:test";
  dl.service = "test.cpu";
  dl.attempts = 3;
  dl.reason = "worker lost";
  dl.payload = Bytes{"x"};
  rc |= write(dir, "dead_letter", encode(dl));
  return rc;
}
