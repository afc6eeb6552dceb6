// kiln-eval-cuda: the CUDA evaluation child, the twin of kiln-eval (kiln/eval/tool.h). The tester runs it in
// a sandbox with CUDA_VISIBLE_DEVICES naming one GPU. A GPU fault becomes a report ("crashed"); a hang is
// ended by the tester's timeout.
#include "kiln/cuda/eval.h"
#include "kiln/eval/tool.h"

int main(int argc, char** argv) {
  kiln::eval::EvalTool tool;
  tool.name = "kiln-eval-cuda";
  tool.evaluate = [](const kiln::task::TaskSpec& spec, const kiln::eval::Candidate& candidate,
                     kiln::eval::KernelEntry reference, const kiln::eval::EvalOptions& options) {
    return kiln::cuda::evaluate(spec, candidate.entry, reference, options);
  };
  tool.worker_info = kiln::cuda::cuda_worker_info;
  tool.load_candidate_here = true;  // CUDA kernels run in this process (no runner for the device yet)
  return kiln::eval::run_eval_tool(argc, argv, tool);
}
