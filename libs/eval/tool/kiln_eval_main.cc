// kiln-eval: the CPU evaluation child the tester runs in a sandbox (DESIGN §5); see kiln/eval/tool.h.
#include "kiln/eval/eval.h"
#include "kiln/eval/host.h"
#include "kiln/eval/tool.h"

int main(int argc, char** argv) {
  return kiln::eval::run_eval_tool(argc, argv, {"kiln-eval", kiln::eval::evaluate, kiln::eval::cpu_worker_info});
}
