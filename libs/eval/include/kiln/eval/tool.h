// The command line shared by the evaluation children the tester runs in a sandbox: kiln-eval (CPU) and
// kiln-eval-cuda. Each loads the task and both shared objects, evaluates, and writes the msgpack
// TestReport to --out. Whenever a report is written the exit code is 0: the report says what happened.
// A crash of the candidate kills the process, and the tester turns that into a result.
#pragma once

#include <functional>

#include "kiln/core/status.h"
#include "kiln/eval/eval.h"
#include "kiln/proto/payloads.h"
#include "kiln/task/task.h"

namespace kiln::eval {

struct EvalTool {
  const char* name = "kiln-eval";  // for usage and log lines
  std::function<Result<proto::TestReport>(const task::TaskSpec&, KernelEntry candidate, KernelEntry reference,
                                          const EvalOptions&)>
      evaluate;
  std::function<proto::WorkerInfo()> worker_info;
};

// main() of an evaluation child: 0 with a report written, 2 on bad usage, 3 if no report could be written.
int run_eval_tool(int argc, char** argv, const EvalTool& tool);

}  // namespace kiln::eval
