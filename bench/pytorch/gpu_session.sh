#!/usr/bin/env bash
# One GPU session for the table of bench/pytorch/README.md: the staged cuda_sgemm program 0 (bench/sgemm/candidate)
# checked and timed against cuBLAS (bench/sgemm/run.sh); where it qualifies (bench/sgemm/qualifies.py: every
# combination correct, the best at least 0.9x cuBLAS) it replaces the task's files in this checkout, so that
# the campaigns that follow search its space; then gpu_vs_torch.sh (campaigns, then each best program pinned
# against torch_eager, torch_compile and cuBLAS). Everything lands under $OUT (sgemm/, vs/).
#   PYTHON=/path/to/python3 OUT=/tmp/session bash bench/pytorch/gpu_session.sh [BUDGET]
# Environment: SGEMM_TIMEOUT (270 s), VS_TIMEOUT (300 s): the limits of the two parts.
set -u
out=${OUT:-$PWD/gpu-out}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out/sgemm" "$out/vs"
OUT=$out/sgemm MEMCHECK_JOBS=${MEMCHECK_JOBS:-12} timeout "${SGEMM_TIMEOUT:-270}" bash "$root/bench/sgemm/run.sh" \
  >"$out/sgemm/run.log" 2>&1
echo "sgemm run.sh exited $?"
if python3 "$root/bench/sgemm/qualifies.py" "$out/sgemm/results.jsonl" | tee "$out/sgemm/verdict.txt"; then
  cp "$root"/bench/sgemm/candidate/{kernel.cu,instructions.md,task.yaml} "$root/configs/tasks/cuda_sgemm/"
  echo "cuda_sgemm: the candidate's files are the task's for the campaigns below"
fi
cd "$root" && OUT=$out/vs timeout "${VS_TIMEOUT:-300}" bash bench/pytorch/gpu_vs_torch.sh "${1:-6}" >"$out/vs/run.log" 2>&1
echo "gpu_vs_torch.sh exited $?"
tail -15 "$out/vs/run.log"
