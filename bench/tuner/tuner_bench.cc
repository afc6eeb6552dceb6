// kiln-bench-tuner: how good is the tuner with a fixed budget, against exhaustive enumeration of the same
// parameter space? Every combination of a CPU task's template parameters is compiled and measured once
// with the real compiler and tester handlers (the exhaustive reference). Then tuner campaigns with
// different seeds run through the real scorer engine and the real tuner, their candidates answered from
// those measurements, so both searches see the same numbers and the comparison is about search alone.
//
//   kiln-bench-tuner [--task configs/tasks/rmsnorm] [--budget 8] [--seeds 20] [--min-time 0.1]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <iostream>
#include <nlohmann/json.hpp>

#include "kiln/scorer/engine.h"
#include "kiln/archive/scoring.h"
#include "kiln/compiler/handler.h"
#include "kiln/core/files.h"
#include "kiln/llm_bridge/handler.h"
#include "kiln/task/task.h"
#include "kiln/tester/handler.h"

using namespace kiln;
using json = nlohmann::json;

namespace {

[[noreturn]] void die(const std::string& what) {
  std::cerr << "kiln-bench-tuner: " << what << "\n";
  std::exit(1);
}

template <class T>
T value_or_die(Result<T> r, const std::string& what) {
  if (!r.is_ok()) die(what + ": " + r.status().to_string());
  return std::move(r).value();
}

proto::Job job_of(const proto::FollowUp& f) {
  proto::Job j;
  j.job_id = f.job_id;
  j.service = f.service;
  j.payload = f.payload;
  return j;
}

struct Measured {
  proto::ScoreResult result;
  double speedup = -1;  // correct and timed, else -1
};

// One combination through the real compiler and tester.
Measured measure(compiler::CompileHandler& cc, tester::TestHandler& tt, const proto::FileMap& files,
                 const task::TaskSpec& spec, const std::map<std::string, std::string>& params, int index) {
  proto::CompileRequest req;
  req.cand.campaign_id = "bench";
  req.cand.program_id = "bench/p" + std::to_string(index);
  req.cand.code = files.at(spec.kernel_file).data;
  req.cand.params = params;
  req.backend = spec.backend;
  req.arch = "native";
  req.files = files;
  messaging::JobOutcome built = cc.compile(req);
  if (built.outcome != messaging::Outcome::kDone || built.next.empty())
    die("compile of " + archive::params_string(params) + ": " + built.error);
  proto::FollowUp next = built.next.front();
  if (next.service.rfind("test.", 0) == 0) {
    messaging::JobOutcome tested = tt.handle(job_of(next));
    if (tested.outcome != messaging::Outcome::kDone || tested.next.empty())
      die("test of " + archive::params_string(params) + ": " + tested.error);
    next = tested.next.front();
  }
  Measured m;
  m.result = value_or_die(proto::decode<proto::ScoreResult>(next.payload.data), "score result");
  proto::EvalResult e = archive::evaluate(m.result);
  m.speedup = e.correctness ? e.runtime_improvement : -1;
  return m;
}

struct CampaignRun {
  double best_speedup = -1;
  int64_t candidates_to_best = 0;  // proposals issued when the best was first scored (program 0 = 0)
};

// One tuner campaign; candidates are answered from `table` (params string -> measurement).
CampaignRun tuner_campaign(const std::string& db, const std::string& campaign_id, const proto::FileMap& files,
                           int64_t budget, const std::map<std::string, Measured>& table, bool blocks) {
  scorer::EngineOptions options;
  options.tuner_blocks = blocks;
  auto engine = value_or_die(scorer::CampaignEngine::open(db, options), "archive");
  llm_bridge::ProposeHandler bridge({}, nullptr);
  bridge.add("tuner", std::make_unique<llm_bridge::TunerProposer>());

  proto::CampaignStart start;
  start.campaign_id = campaign_id;
  start.budget = budget;
  start.max_in_flight = 1;  // sequential: "candidates needed" is then exact
  start.files = files;
  std::deque<proto::FollowUp> queue;
  auto score = [&](const std::string& job_id, const std::string& payload) {
    auto h = value_or_die(engine->handle_job(job_id, payload), "score " + job_id);
    for (auto& f : h.answer.next) queue.push_back(std::move(f));
  };
  score(campaign_id + ":start", proto::encode(start));
  CampaignRun run;
  while (!queue.empty()) {
    proto::FollowUp f = queue.front();
    queue.pop_front();
    if (f.service == "propose") {
      for (auto& n : bridge.handle(job_of(f)).next) queue.push_back(std::move(n));
    } else if (f.service == "compile") {
      auto req = value_or_die(proto::decode<proto::CompileRequest>(f.payload.data), "compile request");
      auto it = table.find(archive::params_string(req.cand.params));
      if (it == table.end()) die("no measurement for " + archive::params_string(req.cand.params));
      proto::ScoreResult r = it->second.result;
      r.cand = req.cand;
      r.purpose = req.purpose;
      const bool confirm = req.purpose == proto::Purpose::kConfirm;
      if (it->second.speedup > run.best_speedup && !confirm) {
        run.best_speedup = it->second.speedup;
        run.candidates_to_best = req.cand.proposal_index;
      }
      score(proto::job_id::score(req.cand.program_id, req.purpose), proto::encode(r));
    } else if (f.service == "promote") {
      auto req = value_or_die(proto::decode<proto::PromoteRequest>(f.payload.data), "promote request");
      proto::PromoteOutcome o;
      o.campaign_id = req.campaign_id;
      o.program_id = req.program_id;
      o.reason = "benchmark: not promoted";
      score(req.program_id + ":promoted", proto::encode(o));
    } else if (f.service == "score") {
      score(f.job_id, f.payload.data);
    }
  }
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln-bench-tuner: the tuner with a fixed budget against exhaustive enumeration (JSON)"};
  std::string task_dir = "configs/tasks/rmsnorm";
  int64_t budget = 8;
  int seeds = 20;
  double min_time_s = 0.1;
  app.add_option("--task", task_dir, "CPU task package with template parameters");
  app.add_option("--budget", budget, "tuner proposals per campaign");
  app.add_option("--seeds", seeds, "tuner campaigns (each draws its own order)");
  app.add_option("--min-time", min_time_s, "tester timing: seconds measured per sample set");
  CLI11_PARSE(app, argc, argv);

  proto::FileMap files = value_or_die(task::load_package(task_dir), "task " + task_dir);
  task::TaskSpec spec = value_or_die(task::parse_task(files), "task " + task_dir);
  if (spec.backend != kiln::proto::Backend::kCpu) die("task " + spec.name + ": the benchmark runs CPU tasks");
  llm_bridge::ParamSpace space = value_or_die(llm_bridge::ParamSpace::make(spec.params), "parameters");
  constexpr uint64_t kMaxExhaustive = 512;  // every combination is compiled and timed once
  if (space.size() > kMaxExhaustive)
    die("parameter space too large to enumerate (" + std::to_string(space.size()) + ")");

  TempDir scratch("kiln-bench-tuner");
  compiler::CompilerOptions copts;
  copts.cache_dir = scratch.path() + "/cache";
  auto cc = value_or_die(compiler::CompileHandler::create(copts, nullptr), "compiler");
  tester::TesterOptions topts;
  topts.timing.min_time_s = min_time_s;
  topts.timing.max_time_s = std::max(1.0, 4 * min_time_s);
  auto tt = value_or_die(tester::TestHandler::create(topts), "tester");

  // Exhaustive: every combination, in index order.
  auto t0 = std::chrono::steady_clock::now();
  std::map<std::string, Measured> table;
  json combos = json::array();
  double best = -1;
  std::string best_params;
  for (uint64_t i = 0; i < space.size(); ++i) {
    auto params = space.combination(i);
    Measured m = measure(*cc, *tt, files, spec, params, static_cast<int>(i));
    const std::string key = archive::params_string(params);
    combos.push_back({{"params", key}, {"speedup", m.speedup}, {"status", archive::status_for(m.result)}});
    if (m.speedup > best) {
      best = m.speedup;
      best_params = key;
    }
    table[key] = std::move(m);
  }
  const double exhaustive_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Tuner campaigns with the same measurements: seeded random sampling (the default) and block
  // sampling (scorer.campaign.tuner_block_sampling), each over the same seeds.
  auto campaigns = [&](bool blocks) {
    json runs = json::array();
    double sum_best = 0, sum_needed = 0;
    int reached_optimum = 0, within_5pct = 0;
    for (int s = 0; s < seeds; ++s) {
      const std::string cid = "tune-" + std::to_string(s);
      const std::string db = scratch.path() + "/archive-" + (blocks ? "b" : "r") + std::to_string(s) + ".db";
      CampaignRun r = tuner_campaign(db, cid, files, budget, table, blocks);
      runs.push_back(
          {{"campaign", cid}, {"best_speedup", r.best_speedup}, {"candidates_to_best", r.candidates_to_best}});
      sum_best += r.best_speedup;
      sum_needed += static_cast<double>(r.candidates_to_best);
      reached_optimum += r.best_speedup >= best;
      within_5pct += r.best_speedup >= 0.95 * best;
    }
    return json{{"block_size", blocks ? llm_bridge::tuner_block_size(space.size(), budget) : 1},
                {"mean_best_speedup", sum_best / seeds},
                {"mean_candidates_to_best", sum_needed / seeds},
                {"fraction_reaching_optimum", static_cast<double>(reached_optimum) / seeds},
                {"fraction_within_5pct", static_cast<double>(within_5pct) / seeds},
                {"runs", runs}};
  };

  json out = {
      {"bench", "tuner"},
      {"task", spec.name},
      {"space_size", space.size()},
      {"budget", budget},
      {"seeds", seeds},
      {"exhaustive",
       {{"candidates", space.size()},
        {"best_speedup", best},
        {"best_params", best_params},
        {"seconds", exhaustive_s},
        {"combinations", combos}}},
      {"tuner", campaigns(false)},
      {"tuner_block_sampling", campaigns(true)},
  };
  std::cout << out.dump(2) << "\n";
  return 0;
}
