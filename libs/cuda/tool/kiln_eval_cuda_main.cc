// kiln-eval-cuda: the CUDA evaluation child, the twin of kiln-eval (kiln/eval/tool.h). The tester runs it in
// a sandbox with CUDA_VISIBLE_DEVICES naming one GPU. The candidate and the reference run in runner
// processes with contexts of their own; a GPU fault becomes a report ("failed: CUDA error ..."); a hang is
// ended by the tester's timeout.
#include "kiln/cuda/eval.h"
#include "kiln/eval/tool.h"

int main(int argc, char** argv) {
  kiln::eval::EvalTool tool;
  tool.name = "kiln-eval-cuda";
  tool.evaluate = [](const kiln::task::TaskSpec& spec, const kiln::eval::Candidate& candidate,
                     const kiln::eval::Candidate& reference, const kiln::eval::EvalOptions& options) {
    return kiln::cuda::evaluate(spec, candidate, reference, options);
  };
  tool.worker_info = kiln::cuda::cuda_worker_info;
  tool.load_reference_here = false;  // a runner creates its context before it loads CUDA code
  return kiln::eval::run_eval_tool(argc, argv, tool);
}
