// Fabricated task packages, results and a follow-up driver for campaign tests: no sockets, no compiler,
// no tester. The driver plays the other services: it answers propose, compile (+ test) and promote
// follow-ups with results chosen by the test, and feeds them back to the scorer.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/proto/payloads.h"
#include "kiln/proto/wire.h"
#include "kiln/testing/test_status.h"

namespace kiln::testing {

inline constexpr const char* kDefaultParams = "params:\n  BLOCK: [64, 128, 256]\n  VEC: [1, 2, 4]\n";

inline proto::FileMap task_files(const std::string& backend = "cpu", const std::string& params_yaml = kDefaultParams) {
  const std::string ext = backend == "cuda" ? ".cu" : ".cpp";
  std::string yaml =
      "name: scale_test\n"
      "op: scale\n"
      "backend: " +
      backend +
      "\n"
      "dtype: fp32\n"
      "inputs:\n"
      "  - {name: x, dtype: fp32, shape: [B, H], init: normal}\n"
      "outputs:\n"
      "  - {name: y, dtype: fp32, shape: [B, H]}\n"
      "correctness:\n"
      "  cases: [{B: 1, H: 64}, {B: 3, H: 67}]\n"
      "benchmark:\n"
      "  cases: [{B: 16, H: 4096}]\n" +
      params_yaml;
  proto::FileMap files;
  files["task.yaml"].data = yaml;
  files["kernel" + ext].data =
      "#include \"kiln/kernel_abi.h\"\n"
      "extern \"C\" int kiln_entry(const kiln_args* a) {\n"
      "  // [EVOLVE_START]\n"
      "  (void)a;\n"
      "  // [EVOLVE_END]\n"
      "  return 0;\n"
      "}\n";
  files["reference" + ext].data =
      "#include \"kiln/kernel_abi.h\"\nextern \"C\" int kiln_entry(const kiln_args*) { return 0; }\n";
  return files;
}

inline proto::CampaignStart campaign_start(const std::string& id, int64_t budget, int64_t max_in_flight,
                                           proto::FileMap files = task_files()) {
  proto::CampaignStart s;
  s.campaign_id = id;
  s.task_id = "t-" + id;
  s.task_name = "scale_test";
  s.budget = budget;
  s.max_in_flight = max_in_flight;
  s.files = std::move(files);
  s.submitted_at = 1.0;
  return s;
}

inline proto::CaseTiming timing(double speedup, double lo, double hi, double median_us = 10.0) {
  proto::CaseTiming c;
  c.dims = {{"B", 16}, {"H", 4096}};
  c.candidate.n = 20;
  c.candidate.median_us = median_us;
  c.candidate.cv = 0.004;
  c.reference.n = 20;
  c.reference.median_us = median_us * speedup;
  c.speedup = speedup;
  c.speedup_lo = lo;
  c.speedup_hi = hi;
  c.warmup_iters = 3;
  c.stop_reason = "noise";
  return c;
}

// A test-stage result with the given status; timed when `speedup` > 0.
inline proto::ScoreResult test_result(const proto::Candidate& cand, std::optional<proto::TestStatus> status,
                                      double speedup = 0, double lo = 0, double hi = 0, double median_us = 10.0) {
  proto::ScoreResult r;
  r.cand = cand;
  r.stage = proto::Stage::kTest;
  r.build.ok = true;
  r.build.compiler = "g++";
  r.build.kernel_sha256 = "abc";
  r.test.status = status;
  r.test.correctness.passed = r.test.status == proto::TestStatus::kOk;
  r.test.correctness.rtol = 1e-3;
  r.test.correctness.atol = 1e-3;
  r.test.correctness.tested_shapes = {"B=1,H=64", "B=3,H=67"};
  r.test.worker.device_name = "Test CPU";
  r.test.worker.worker_id = "tester-1";
  if (r.test.status != proto::TestStatus::kOk) {
    r.test.message = std::string(proto::word_of(r.test.status)) + ": fabricated";
    r.test.correctness.mismatches = 3;
    r.test.correctness.first_mismatches = {"y[1]: got 2 expected 1 (B=1,H=64 seed 0)"};
  }
  if (speedup > 0) {
    r.test.performance.measured = true;
    r.test.performance.method = "host_clock";
    r.test.performance.mode = "cold";
    r.test.performance.cases.push_back(timing(speedup, lo, hi, median_us));
  }
  return r;
}

inline proto::ScoreResult correct(const proto::Candidate& cand, double speedup, double lo, double hi) {
  return test_result(cand, proto::TestStatus::kOk, speedup, lo, hi);
}

inline proto::ScoreResult build_failed(const proto::Candidate& cand, std::string log) {
  proto::ScoreResult r;
  r.cand = cand;
  r.stage = proto::Stage::kCompile;
  r.error = "g++ exited with 1";
  r.build.log = std::move(log);
  return r;
}

template <class T>
T decode_or_die(const std::string& bytes) {
  auto r = proto::decode<T>(bytes);
  if (!r.is_ok()) throw std::runtime_error("decode: " + r.status().to_string());
  return std::move(r).value();
}

// Everything the "other services" saw, for assertions.
struct Trace {
  std::vector<proto::FollowUp> followups;
  std::vector<proto::PromoteRequest> promotions;
  std::set<std::string> scored_jobs;
  int max_in_flight_seen = 0;
};

// Plays propose, compile+test and promote for a scorer reachable through `score`.
class Driver {
 public:
  using ScoreFn = std::function<std::vector<proto::FollowUp>(const std::string& job_id, const std::string& payload)>;
  using TestFn = std::function<proto::ScoreResult(const proto::Candidate& cand, bool confirm)>;
  using ProposeFn = std::function<std::vector<proto::FollowUp>(const proto::FollowUp& job)>;
  using PromoteFn = std::function<proto::PromoteOutcome(const proto::PromoteRequest&)>;

  Driver(ScoreFn score, TestFn test) : score_(std::move(score)), test_(std::move(test)) {
    propose_ = [](const proto::FollowUp& f) {
      // A stand-in proposer: the parent's code, params naming the proposal.
      auto req = decode_or_die<proto::ProposalRequest>(f.payload.data);
      proto::CompileRequest c;
      c.cand.campaign_id = req.parent.campaign_id;
      c.cand.program_id = req.program_id;
      c.cand.parent_id = req.parent.program_id;
      c.cand.generation = req.parent.generation + 1;
      c.cand.proposal_index = req.proposal_index;
      c.cand.proposer = req.proposer;
      c.cand.code = req.parent.code;
      c.cand.params = {{"BLOCK", std::to_string(64 * req.proposal_index)}};
      c.backend = proto::Backend::kCpu;
      c.arch = "native";
      proto::FollowUp out;
      out.service = "compile";
      out.job_id = req.program_id + ":compile";
      out.payload.data = proto::encode(c);
      return std::vector<proto::FollowUp>{out};
    };
    promote_ = [](const proto::PromoteRequest& req) {
      proto::PromoteOutcome o;
      o.campaign_id = req.campaign_id;
      o.program_id = req.program_id;
      o.promoted = true;
      o.kernel_id = "cpp_scale_testcpu_fp32_b16_h4096_v1";
      return o;
    };
  }

  void set_propose(ProposeFn fn) { propose_ = std::move(fn); }
  void set_promote(PromoteFn fn) { promote_ = std::move(fn); }

  void submit(const std::string& job_id, const std::string& payload) { enqueue(score_(job_id, payload)); }

  // Runs follow-ups first in, first out until none is left (or `max_steps` ran).
  void run(size_t max_steps = 10000) {
    for (size_t step = 0; step < max_steps && !queue_.empty(); ++step) {
      proto::FollowUp f = queue_.front();
      queue_.pop_front();
      if (f.service == "propose") {
        enqueue(propose_(f));
      } else if (f.service == "compile") {
        auto c = decode_or_die<proto::CompileRequest>(f.payload.data);
        // As the compiler and the tester do: the purpose goes on with the candidate, and names the job.
        proto::ScoreResult r = test_(c.cand, c.purpose == proto::Purpose::kConfirm);
        r.cand = c.cand;
        r.purpose = c.purpose;
        feed(proto::job_id::score(c.cand.program_id, c.purpose), proto::encode(r));
      } else if (f.service == "promote") {
        auto req = decode_or_die<proto::PromoteRequest>(f.payload.data);
        trace.promotions.push_back(req);
        feed(req.program_id + ":promoted", proto::encode(promote_(req)));
      } else if (f.service == "score") {
        feed(f.job_id, f.payload.data);
      } else {
        throw std::runtime_error("driver: unexpected service " + f.service);
      }
    }
  }

  bool idle() const { return queue_.empty(); }
  size_t pending() const { return queue_.size(); }
  // Takes the oldest follow-up out of the queue without running it (to simulate a lost or late job).
  proto::FollowUp take() {
    proto::FollowUp f = queue_.front();
    queue_.pop_front();
    return f;
  }

  Trace trace;

 private:
  void feed(const std::string& job_id, const std::string& payload) {
    trace.scored_jobs.insert(job_id);
    enqueue(score_(job_id, payload));
  }
  void enqueue(std::vector<proto::FollowUp> next) {
    for (auto& f : next) {
      trace.followups.push_back(f);
      queue_.push_back(std::move(f));
    }
  }

  ScoreFn score_;
  TestFn test_;
  ProposeFn propose_;
  PromoteFn promote_;
  std::deque<proto::FollowUp> queue_;
};

}  // namespace kiln::testing
