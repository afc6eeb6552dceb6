// What the scorer keeps and answers: the archive's records (a program, its evaluation and each benchmark
// case's speedups) and the answers to campaign queries (kiln status, kiln best). Included by payloads.h,
// which holds the job payloads that travel through the broker.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/proto/codec.h"
#include "kiln/proto/ids.h"
#include "kiln/proto/measurement.h"

namespace kiln::proto {
// ----------------------------------------------------------------------------- archive records

// One benchmark case of a program's measurement, as the scorer keeps it (v4).
struct CaseSpeedup {
  std::map<std::string, int64_t> dims;
  double speedup = 0;     // reference median / candidate median
  double speedup_lo = 0;  // its 95 % interval
  double speedup_hi = 0;
  double median_us = 0;  // candidate
  double reference_median_us = 0;
  int64_t n = 0;  // candidate samples
  // Optional (v5): the task's baselines timed in the same run (torch_eager, cublas_sgemm ...), each with
  // the candidate's speedup over it and its interval.
  std::vector<BaselineTiming> baselines;
  template <class V>
  void fields(V& v) {
    v("dims", dims);
    v("speedup", speedup);
    v("speedup_lo", speedup_lo);
    v("speedup_hi", speedup_hi);
    v("median_us", median_us);
    v("reference_median_us", reference_median_us);
    v("n", n);
    v("baselines", baselines);
  }
};

// KernelFoundry's EvalResult fields (DESIGN §6). Since envelope "v" 2 the timing fields summarize every
// benchmark case (archive/scoring.h); with one case they are that case's numbers, as before.
struct EvalResult {
  bool compiled = false;
  bool correctness = false;
  double runtime = -1;  // ms, geometric mean over the benchmark cases of the candidate's median
  std::map<std::string, double> runtime_stats;
  double runtime_improvement = -1;  // speedup vs reference: geometric mean over the cases; -1 if not measured
  double improve_over_baseline = -1;
  int64_t perf_score = -1;  // 0..5
  std::map<std::string, double> profiler_data;
  // For a templated program: every parameter set tried with its code in its campaign ("BLOCK=256 VEC=4")
  // -> the best combined_score it got, at most kMaxTemplateResults of the best. The tuner tries one set
  // per program, so a kernel's sets are spread over the programs sharing its code; the scorer fills this
  // when it answers a query (kiln best), so it covers the campaign so far, and leaves it out of the
  // stored record.
  std::map<std::string, double> template_results;
  std::string eval_log;  // condensed feedback for proposers
  double combined_score = 0;
  std::string status;
  // Optional (v4): every benchmark case's numbers, in task order.
  std::vector<CaseSpeedup> cases;
  // Optional (v4): how it was measured: the tester's TestReport.metadata plus "device", "host",
  // "worker_id", "driver_version", "runtime_version", "toolchain", "timing_method", "timing_mode",
  // "build_toolchain" and "build_flags" (those known). Empty when no test ran.
  std::map<std::string, std::string> metadata;
  template <class V>
  void fields(V& v) {
    v("compiled", compiled);
    v("correctness", correctness);
    v("runtime", runtime);
    v("runtime_stats", runtime_stats);
    v("runtime_improvement", runtime_improvement);
    v("improve_over_baseline", improve_over_baseline);
    v("perf_score", perf_score);
    v("profiler_data", profiler_data);
    v("template_results", template_results);
    v("eval_log", eval_log);
    v("combined_score", combined_score);
    v("status", status);
    v("cases", cases);
    v("metadata", metadata);
  }
};

inline constexpr size_t kMaxTemplateResults = 64;

// The task a program belongs to (the seeds' Program.task holds the whole task; the package is stored
// once per campaign, so a program names it).
struct TaskRef {
  std::string task_id;  // task_id(files): the name of the package's blob
  std::string name;
  std::string op;
  std::optional<Backend> backend;  // "" when unknown
  std::string dtype;
  template <class V>
  void fields(V& v) {
    v("task_id", task_id);
    v("name", name);
    v("op", op);
    v("backend", backend);
    v("dtype", dtype);
  }
};

// KernelFoundry's Program fields.
struct Program {
  std::string id;
  std::string code;
  bool is_program0 = false;
  std::string language;
  std::string parent_id;
  int64_t generation = 0;
  double timestamp = 0;
  int64_t iteration_found = 0;
  std::map<std::string, double> metrics;
  // Both from the archive's feature code (archive/features.h): complexity is the number of code lines
  // (comments and blank lines aside) of the kernel; diversity is how far its behaviour coordinates lie
  // from the programs the archive held when it was scored (mean distance, 0-1).
  double complexity = 0;
  double diversity = 0;
  bool is_templated = false;
  std::map<std::string, std::string> template_parameters;
  std::map<std::string, std::string> metadata;
  EvalResult eval;
  std::string feedback;
  // Optional (v4).
  TaskRef task;
  std::string raw_llm_code;  // Candidate.raw_llm_code
  template <class V>
  void fields(V& v) {
    v("id", id);
    v("code", code);
    v("is_program0", is_program0);
    v("language", language);
    v("parent_id", parent_id);
    v("generation", generation);
    v("timestamp", timestamp);
    v("iteration_found", iteration_found);
    v("metrics", metrics);
    v("complexity", complexity);
    v("diversity", diversity);
    v("is_templated", is_templated);
    v("template_parameters", template_parameters);
    v("metadata", metadata);
    v("eval", eval);
    v("feedback", feedback);
    v("task", task);
    v("raw_llm_code", raw_llm_code);
  }
};

// ----------------------------------------------------------------------------- scorer queries

struct CampaignQuery {
  std::string campaign_id;  // empty = all
  int64_t top = 5;
  // Without a campaign id: the running campaigns and only the `recent` that ended last (0 = every one).
  // Scorers that predate it list every campaign.
  int64_t recent = 0;
  template <class V>
  void fields(V& v) {
    v("campaign_id", campaign_id);
    v("top", top);
    v("recent", recent);
  }
};

struct CampaignInfo {
  std::string campaign_id;
  std::string task_name;
  std::string task_id;
  std::optional<Backend> backend;  // "" when unknown
  std::string state;               // running | done
  int64_t budget = 0;
  int64_t proposed = 0;  // proposals issued (program 0 excluded)
  int64_t scored = 0;    // programs with a final score (program 0 included)
  int64_t correct = 0;
  int64_t in_flight = 0;
  std::string best_program_id;
  double best_score = 0;
  double best_speedup = -1;
  double best_speedup_lo = -1;
  double best_speedup_hi = -1;
  std::map<std::string, std::string> best_params;
  std::vector<std::string> promoted;  // kernel ids
  std::vector<std::string> promotion_notes;
  double started_at = 0;
  double finished_at = 0;
  // Optional (v2).
  std::string proposer;
  std::string stop_reason;    // why proposing stopped early ("" = budget or still running)
  int64_t cells_filled = 0;   // MAP-Elites cells holding a program (over all islands, distinct)
  int64_t prompt_tokens = 0;  // LLM token usage of the campaign
  int64_t completion_tokens = 0;
  int64_t prompts = 0;  // strategy sections (meta-prompts) seen
  // Optional (v3).
  int64_t not_evaluated = 0;  // programs dead-lettered by a fault not theirs (no score; see DeadLetter)
  // Optional (v4).
  std::string last_not_evaluated;  // why the latest of those was not evaluated ("" = none)
  template <class V>
  void fields(V& v) {
    v("campaign_id", campaign_id);
    v("task_name", task_name);
    v("task_id", task_id);
    v("backend", backend);
    v("state", state);
    v("budget", budget);
    v("proposed", proposed);
    v("scored", scored);
    v("correct", correct);
    v("in_flight", in_flight);
    v("best_program_id", best_program_id);
    v("best_score", best_score);
    v("best_speedup", best_speedup);
    v("best_speedup_lo", best_speedup_lo);
    v("best_speedup_hi", best_speedup_hi);
    v("best_params", best_params);
    v("promoted", promoted);
    v("promotion_notes", promotion_notes);
    v("started_at", started_at);
    v("finished_at", finished_at);
    v("proposer", proposer);
    v("stop_reason", stop_reason);
    v("cells_filled", cells_filled);
    v("prompt_tokens", prompt_tokens);
    v("completion_tokens", completion_tokens);
    v("prompts", prompts);
    v("not_evaluated", not_evaluated);
    v("last_not_evaluated", last_not_evaluated);
  }
};

struct CampaignList {
  std::vector<CampaignInfo> campaigns;  // by start time
  int64_t not_listed = 0;               // ended campaigns left out by CampaignQuery::recent
  template <class V>
  void fields(V& v) {
    v("campaigns", campaigns);
    v("not_listed", not_listed);
  }
};

struct BestPrograms {
  CampaignInfo campaign;
  std::vector<Program> programs;  // best first
  template <class V>
  void fields(V& v) {
    v("campaign", campaign);
    v("programs", programs);
  }
};

}  // namespace kiln::proto
