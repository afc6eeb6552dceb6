// kiln-eval-cuda: the CUDA evaluation child, the twin of kiln-eval (kiln/eval/tool.h). The tester runs it in
// a sandbox with CUDA_VISIBLE_DEVICES naming one GPU. A GPU fault becomes a report ("crashed"); a hang is
// ended by the tester's timeout.
#include "kiln/cuda/eval.h"
#include "kiln/eval/tool.h"

int main(int argc, char** argv) {
  return kiln::eval::run_eval_tool(argc, argv,
                                   {"kiln-eval-cuda", kiln::cuda::evaluate, kiln::cuda::cuda_worker_info});
}
