#!/usr/bin/env bash
# On a GPU host with torch, from build-gpu/kit.tar.xz (bench/timing/make_gpu_kit.sh): what a PyTorch
# reference costs an evaluation against a C one. The same op, softmax over rows, program 0 of each: the
# bundled cuda_softmax (C reference, its torch_eager baseline left out) and the KernelBench-format
# kb_softmax_cuda (reference.py), each evaluated RUNS times by kiln-eval-cuda; per run the wall time of the
# whole child and its start phases (contexts, runners: Python and torch imported in the runner) as the
# report's metadata gives them. JSON lines on stdout.
#   PYTHON=/path/to/python3 bash bench/kernelbench/gpu_overhead.sh [RUNS]
set -euo pipefail
runs=${1:-3}
python=${PYTHON:-python3}
[ -d build-gpu/bin ] || tar xJf build-gpu/kit.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu-rt/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
so() { nvcc -arch=sm_90 -O3 -shared -Xcompiler -fPIC -cudart shared -Ilibs/core/include -o "$2" "$1"; }
so configs/tasks/cuda_softmax/kernel.cu "$work/c_kernel.so"
so configs/tasks/cuda_softmax/reference.cu "$work/c_reference.so"
so configs/kernelbench/kb_softmax_cuda/kernel.cu "$work/kb_kernel.so"
eval_one() {  # NAME ARGS...
  local name=$1; shift
  local t0 t1
  t0=$(date +%s.%N)
  build-gpu/bin/kiln-eval-cuda "$@" --out "$work/r.msgpack" --min-time 0.3 --max-time 3 > "$work/log" 2>&1 || { cat "$work/log" >&2; return 1; }
  t1=$(date +%s.%N)
  echo "{\"task\": \"$name\", \"wall_s\": $(python3 -c "print(round($t1 - $t0, 3))"), \"report\": $(python3 bench/timing/report_numbers.py "$work/r.msgpack" --json)}"
}
for _ in $(seq 1 "$runs"); do
  eval_one cuda_softmax --task configs/tasks/cuda_softmax --kernel "$work/c_kernel.so" --reference "$work/c_reference.so" --no-torch-baselines
  eval_one kb_softmax_cuda --task configs/kernelbench/kb_softmax_cuda --kernel "$work/kb_kernel.so" --python "$python"
done
