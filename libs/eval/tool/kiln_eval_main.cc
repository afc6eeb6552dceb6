// kiln-eval: the CPU evaluation child the tester runs in a sandbox (DESIGN §5); see kiln/eval/tool.h.
#include "kiln/eval/eval.h"
#include "kiln/eval/host.h"
#include "kiln/eval/tool.h"

int main(int argc, char** argv) {
  kiln::eval::EvalTool tool;
  tool.name = "kiln-eval";
  tool.evaluate = [](const kiln::task::TaskSpec& spec, const kiln::eval::Candidate& candidate,
                     const kiln::eval::Candidate& reference, const kiln::eval::EvalOptions& options) {
    return kiln::eval::evaluate(spec, candidate, reference.entry, options);
  };
  tool.worker_info = kiln::eval::cpu_worker_info;
  return kiln::eval::run_eval_tool(argc, argv, tool);
}
