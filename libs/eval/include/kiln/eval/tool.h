// The command line shared by the evaluation children the tester runs in a sandbox: kiln-eval (CPU) and
// kiln-eval-cuda. Each loads the task and the reference, evaluates the candidate, and writes the msgpack
// TestReport to --out. Whenever a report is written the exit code is 0: the report says what happened,
// including whose fault a failure is: `load_failed` when the candidate will not load, `evaluator_error`
// when this evaluation cannot be done here (the task or the reference will not load, evaluate() fails:
// eval.h), which the tester answers with a retry, never a score.
//
// With --report-key FILE the key in FILE (read, then the file removed, before any candidate code runs)
// authenticates the report: --out.mac holds HMAC-SHA256(key, report) in hex, and the tester believes only
// a report whose MAC it can verify. Neither child loads the candidate: it runs in a runner process that
// never holds the key (docs/threat-model.md).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "kiln/core/status.h"
#include "kiln/eval/eval.h"
#include "kiln/proto/payloads.h"
#include "kiln/task/task.h"

namespace kiln::eval {

struct EvalTool {
  const char* name = "kiln-eval";  // for usage and log lines
  // The candidate always comes as a path (it is loaded only in its runner); the reference as an entry
  // point of this process or as a path (load_reference_here).
  std::function<Result<proto::TestReport>(const task::TaskSpec&, const Candidate& candidate, const Candidate& reference,
                                          const EvalOptions&)>
      evaluate;
  std::function<proto::WorkerInfo()> worker_info;
  // true: the reference is dlopened here before any runner is forked (the CPU runners inherit it); false:
  // its runner loads it (a CUDA runner must create its own context before any CUDA code is loaded).
  bool load_reference_here = true;
};

// The name of the MAC file beside a report.
inline std::string report_mac_path(const std::string& report_path) { return report_path + ".mac"; }

// Whether `report` with MAC `mac_hex` was written by an evaluation child holding `key`.
bool report_authentic(std::string_view key, std::string_view report, std::string_view mac_hex);

// main() of an evaluation child: 0 with a report written, 2 on bad usage, 3 if no report could be written.
int run_eval_tool(int argc, char** argv, const EvalTool& tool);

}  // namespace kiln::eval
