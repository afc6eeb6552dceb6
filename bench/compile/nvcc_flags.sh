#!/usr/bin/env bash
# What each nvcc flag of the compiler's CUDA build costs: every bundled CUDA task's kernel.cu built as the
# compiler builds it, then with one change at a time, REPS times each (one build at a time, nothing else
# running), the median wall time per variant and task as JSON lines; then every task evaluated once by
# kiln-eval-cuda with kernel and reference built the fastest way, to show those binaries still load and
# pass (GPU host only; skipped without BIN_DIR/kiln-eval-cuda).
#   bash bench/compile/nvcc_flags.sh [TASKS_DIR] [BIN_DIR]     REPS=3 ARCH=90 NVCC=/usr/local/cuda/bin/nvcc
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tasks=${1:-$root/configs/tasks}
bin=${2:-$root/build/bin}
reps=${REPS:-3}
arch=${ARCH:-90}
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/kiln"
cp "$root/libs/core/include/kiln/kernel_abi.h" "$work/kiln/"
common=(-shared -Xcompiler -fPIC -cudart shared -I"$work")
declare -A variants=(
  [as_built]="-O3 -gencode arch=compute_$arch,code=[sm_$arch,compute_$arch] -Xptxas -v"
  [no_ptx]="-O3 -gencode arch=compute_$arch,code=sm_$arch -Xptxas -v"
  [host_O1]="-O1 -gencode arch=compute_$arch,code=[sm_$arch,compute_$arch] -Xptxas -v"
  [no_dlink]="-O3 -gencode arch=compute_$arch,code=[sm_$arch,compute_$arch] -Xptxas -v -nodlink"
  [all_three]="-O1 -gencode arch=compute_$arch,code=sm_$arch -Xptxas -v -nodlink"
)
for v in as_built no_ptx host_O1 no_dlink all_three; do
  for t in "$tasks"/cuda_*/; do
    task=$(basename "$t")
    times=()
    for ((i = 0; i < reps; ++i)); do
      s=$EPOCHREALTIME
      # shellcheck disable=SC2086
      "$nvcc" "${common[@]}" ${variants[$v]} -o "$work/$task.$v.so" "$t/kernel.cu" > "$work/log" 2>&1 || { echo "{\"variant\": \"$v\", \"task\": \"$task\", \"error\": \"build failed\"}"; continue 2; }
      times+=("$(awk -v a="$s" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.3f", b - a}')")
    done
    median=$(printf '%s\n' "${times[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    echo "{\"variant\": \"$v\", \"flags\": \"${variants[$v]}\", \"task\": \"$task\", \"median_s\": $median, \"runs\": [$(IFS=,; echo "${times[*]}")], \"so_bytes\": $(stat -c %s "$work/$task.$v.so")}"
  done
done
# Phases of one build of the fastest variant (nvcc -time).
# shellcheck disable=SC2086
"$nvcc" "${common[@]}" ${variants[all_three]} -o "$work/phases.so" "$tasks/cuda_softmax/kernel.cu" -time "$work/phases.csv" > /dev/null 2>&1 &&
  awk -F' , ' 'NR > 1 {printf "{\"phase\": \"%s\", \"ms\": %s}\n", $2, $7}' "$work/phases.csv"
[ -x "$bin/kiln-eval-cuda" ] || exit 0
for t in "$tasks"/cuda_*/; do
  task=$(basename "$t")
  # shellcheck disable=SC2086
  "$nvcc" "${common[@]}" ${variants[all_three]} -o "$work/ref.so" "$t/reference.cu" > /dev/null 2>&1
  "$bin/kiln-eval-cuda" --task "$t" --kernel "$work/$task.all_three.so" --reference "$work/ref.so" \
    --out "$work/r.msgpack" --min-time 0.05 --max-time 0.2 > "$work/eval.log" 2>&1
  echo "{\"evaluated\": \"$task\", \"exit\": $?, \"verdict\": \"$(grep -m1 -o 'correct on[^;]*' "$work/eval.log" | tr -d '"\\')\"}"
done
