#!/usr/bin/env bash
# The CUDA runner's cost and steadiness on a GPU host: A/A evaluations (the reference timed as its own
# candidate) of a kernel that spins for a fixed number of clock cycles (~10 us, ~100 us, ~1 ms at boost
# clock), each repeated in separate kiln-eval-cuda runs. Reports per size the medians of every run, their
# spread ((max - min) / mean), the speedup intervals and the call overhead the evaluator subtracted, as
# JSON. With OLD_EVAL pointing at another kiln-eval-cuda (an earlier build), the same runs are made with
# it in the same session for comparison.
#   bench/timing/cuda_runner.sh EVAL [RUNS] > result.json
set -euo pipefail
eval_bin=$(realpath "${1:?usage: cuda_runner.sh KILN_EVAL_CUDA [RUNS]}")
runs=${2:-5}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nvcc=${NVCC:-nvcc}

cat > "$work/spin.cu" <<'EOF'
#include "kiln/kernel_abi.h"
// Spins for `cycles` SM clock cycles, then copies x to y: a kernel whose duration is fixed by construction.
__global__ void spin_copy(const float* x, float* y, long long n, long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = x[i];
}
extern "C" KILN_EXPORT int kiln_entry(const kiln_args* a) {
  const long long cycles = (long long)kiln_scalar(a, "cycles", 0);
  spin_copy<<<1, 256, 0, (cudaStream_t)a->stream>>>((const float*)a->inputs[0].data, (float*)a->outputs[0].data,
                                                    a->inputs[0].shape[0], cycles);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
EOF
"$nvcc" -O3 -shared -Xcompiler -fPIC -cudart shared -arch=sm_90 -I"$root/libs/core/include" -o "$work/spin.so" "$work/spin.cu"

measure() {  # EVAL LABEL CYCLES
  local bin=$1 label=$2 cycles=$3 dir="$work/task-$3"
  mkdir -p "$dir"
  cp "$work/spin.cu" "$dir/reference.cu"
  sed 's|^extern "C"|// [EVOLVE_START]\n// [EVOLVE_END]\nextern "C"|' "$work/spin.cu" > "$dir/kernel.cu"
  cat > "$dir/task.yaml" <<EOF
name: spin
op: spin
backend: cuda
dtype: fp32
inputs:
  - {name: x, dtype: fp32, shape: [N], init: normal}
outputs:
  - {name: y, dtype: fp32, shape: [N]}
scalars: {cycles: $cycles}
correctness:
  cases: [{N: 1}, {N: 1000}]
  seeds: 1
  rtol: 1.0e-6
  atol: 1.0e-6
benchmark:
  cases: [{N: 1024}]
EOF
  for i in $(seq 1 "$runs"); do
    rm -f "$work/r.msgpack"
    ( cd "$work" && "$bin" --task "$dir" --kernel ./spin.so --reference ./spin.so --out "r.msgpack" \
        --mode cold --min-time 0.5 --max-time 5 2> "err.txt" > /dev/null ) || true
    local over nums
    over=$(grep -o 'overhead [0-9.]* us' "$work/err.txt" | grep -o '[0-9.]*' | head -1 || true)
    nums=$(python3 "$root/bench/timing/report_numbers.py" "$work/r.msgpack" 2>/dev/null || echo "")
    echo "$label cycles=$cycles run=$i | overhead_us=${over:-na} | cand ref speedup lo hi: ${nums:-no report}" >&2
    [ -z "$nums" ] && tail -c 400 "$work/err.txt" >&2
    echo "$label $cycles $i ${over:-nan} $nums"
  done
}

{
  for cycles in ${CYCLES:-20000 200000 2000000}; do
    measure "$eval_bin" runner "$cycles"
    if [ -n "${OLD_EVAL:-}" ]; then measure "$(realpath "$OLD_EVAL")" "${OLD_LABEL:-in_process}" "$cycles"; fi
  done
} > "$work/rows.txt"

python3 - "$work/rows.txt" <<'EOF'
import json, statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
out = {"bench": "cuda_runner_aa", "cases": []}
keys = sorted({(r[0], int(r[1])) for r in rows}, key=lambda k: (k[1], k[0]))
for label, cycles in keys:
    sel = [r for r in rows if r[0] == label and int(r[1]) == cycles]
    cand = [float(r[4]) for r in sel if len(r) >= 6]
    ref = [float(r[5]) for r in sel if len(r) >= 6]
    over = [float(r[3]) for r in sel if r[3] != "nan"]
    sp = [[float(x) for x in r[6:9]] for r in sel if len(r) >= 9]
    spread = lambda v: (max(v) - min(v)) / statistics.mean(v) if len(v) > 1 else None
    out["cases"].append({"evaluator": label, "cycles": cycles, "runs": len(sel),
                         "candidate_median_us": cand, "reference_median_us": ref,
                         "candidate_median_spread": spread(cand), "reference_median_spread": spread(ref),
                         "call_overhead_us": over, "speedup_intervals": sp,
                         "intervals_containing_1": sum(1 for s in sp if s[1] <= 1.0 <= s[2])})
print(json.dumps(out, indent=1))
EOF
