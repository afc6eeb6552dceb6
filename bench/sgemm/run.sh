#!/usr/bin/env bash
# cuda_sgemm against cuBLAS on a GPU host with only the CUDA toolkit: builds configs/tasks/cuda_sgemm/kernel.cu
# once per parameter combination of its task.yaml (the parameters as -D flags and nvcc flags as Kiln's compiler
# passes them), links each with sgemm_check.cu and cuBLAS, checks it under compute-sanitizer memcheck on small
# shapes, then checks and times it against cublasSgemm on 4096^3 (sgemm_check.cu says how).
#
#   OUT=/tmp/sgemm bench/sgemm/run.sh                     # every combination
#   OUT=/tmp/sgemm bench/sgemm/run.sh "BM=128 BN=128 BK=8 TM=16 TN=8 STAGES=3"
#
# Environment: NVCC (/usr/local/cuda/bin/nvcc), ARCH (sm_90), SANITIZE (1; 0 skips memcheck), REPS (20),
# SIZE (4096), JOBS (parallel builds, nproc), MEMCHECK_JOBS (memcheck runs at once, 8).
# Writes $OUT/results.jsonl (one JSON line per combination:
# params, correct, max_err, kernel_us, cublas_us, ratio = cublas_us / kernel_us, regs, spills),
# $OUT/summary.txt (sorted by ratio), $OUT/build/*.log (ptxas -v per combination), $OUT/gpu.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
task=${TASK_DIR:-$root/configs/tasks/cuda_sgemm}
out=${OUT:-./out}
mkdir -p "$out/build"
out=$(cd "$out" && pwd)
export NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
export ARCH=${ARCH:-sm_90}
sanitize=${SANITIZE:-1}
reps=${REPS:-20}
size=${SIZE:-4096}
jobs=${JOBS:-$(nproc)}
export ROOT=$root TASK=$task BUILD=$out/build
number=${ARCH#sm_}
export GENCODE="arch=compute_$number,code=[sm_$number,compute_$number]"

if [ $# -gt 0 ]; then combos=("$@"); else mapfile -t combos < <("$here/combos.sh" "$task/task.yaml"); fi
echo "sgemm: ${#combos[@]} combinations of $task, $ARCH, output in $out"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv 2>&1 || true
  "$NVCC" --version | tail -2; } >"$out/gpu.txt"

"$NVCC" -O3 -std=c++17 -gencode "$GENCODE" -cudart shared -I"$root/libs/core/include" \
  -c "$here/sgemm_check.cu" -o "$BUILD/check.o"

# One combination: the kernel object as Kiln's compiler builds a candidate (-O3 -Xcompiler -fPIC -gencode ...
# -cudart shared -Xptxas -v, then -DNAME=value per parameter), linked with the check and cuBLAS.
build_one() {
  local combo=$1 tag defs=() kv
  tag=$(tr ' =' '_-' <<<"$combo")
  for kv in $combo; do defs+=("-D$kv"); done
  if "$NVCC" -O3 -Xcompiler -fPIC -gencode "$GENCODE" -cudart shared -Xptxas -v -I"$ROOT/libs/core/include" \
       "${defs[@]}" -c "$TASK/kernel.cu" -o "$BUILD/k_$tag.o" >"$BUILD/$tag.log" 2>&1 &&
     "$NVCC" -o "$BUILD/sgemm_$tag" "$BUILD/check.o" "$BUILD/k_$tag.o" -cudart shared -lcublas >>"$BUILD/$tag.log" 2>&1; then
    echo "built $combo"
  else
    echo "BUILD FAILED $combo (see $BUILD/$tag.log)"
  fi
}
export -f build_one
printf '%s\n' "${combos[@]}" | xargs -d '\n' -P "$jobs" -n 1 bash -c 'build_one "$1"' _

# compute-sanitizer memcheck on the small shapes, several combinations at once (correctness only, no timing).
export SANITIZER=${SANITIZER:-$(dirname "$NVCC")/compute-sanitizer}
memcheck_one() {
  local combo=$1 tag
  tag=$(tr ' =' '_-' <<<"$combo")
  [ -x "$BUILD/sgemm_$tag" ] || return 0
  if timeout 300 "$SANITIZER" --tool memcheck --error-exitcode 9 "$BUILD/sgemm_$tag" --small-only --params "$combo" \
       >"$BUILD/memcheck_$tag.log" 2>&1; then
    echo "memcheck ok $combo"
  else
    echo "MEMCHECK FAILED $combo (see $BUILD/memcheck_$tag.log)"
    touch "$BUILD/memcheck_failed_$tag"
  fi
}
export -f memcheck_one
rm -f "$BUILD"/memcheck_failed_*
if [ "$sanitize" = 1 ] && [ -x "$SANITIZER" ]; then
  printf '%s\n' "${combos[@]}" | xargs -d '\n' -P "${MEMCHECK_JOBS:-8}" -n 1 bash -c 'memcheck_one "$1"' _
elif [ "$sanitize" = 1 ]; then
  echo "no $SANITIZER: memcheck skipped"
fi

# Correctness and timing, one combination at a time (the GPU to itself).
: >"$out/results.jsonl"
for combo in "${combos[@]}"; do
  tag=$(tr ' =' '_-' <<<"$combo")
  bin=$BUILD/sgemm_$tag
  if [ ! -x "$bin" ]; then
    echo "{\"params\": \"$combo\", \"correct\": false, \"why\": \"build failed\"}" | tee -a "$out/results.jsonl"
    continue
  fi
  if [ -e "$BUILD/memcheck_failed_$tag" ]; then
    echo "{\"params\": \"$combo\", \"correct\": false, \"why\": \"compute-sanitizer memcheck\"}" | tee -a "$out/results.jsonl"
    continue
  fi
  regs=$(grep -o 'Used [0-9]* registers' "$BUILD/$tag.log" | head -1 | grep -o '[0-9]*' || echo -1)
  spills=$(grep -o '[0-9]* bytes spill stores' "$BUILD/$tag.log" | head -1 | grep -o '^[0-9]*' || echo -1)
  line=$(timeout 120 "$bin" --params "$combo" --regs "$regs" --spills "$spills" --reps "$reps" --size "$size" \
           2>>"$BUILD/run_$tag.log" || true)
  [ -n "$line" ] || line="{\"params\": \"$combo\", \"correct\": false, \"why\": \"sgemm_check failed: $(tail -1 "$BUILD/run_$tag.log" | tr -d '"\\')\"}"
  echo "$line" | tee -a "$out/results.jsonl"
done

# Sorted by ratio (cublas_us / kernel_us), best first.
{ echo "ratio  kernel_us  cublas_us  correct  regs  params"
  grep '"ratio"' "$out/results.jsonl" |
    sed -E 's/.*"params": \{([^}]*)\}, "correct": ([a-z]*).*"kernel_us": ([0-9.]*), "cublas_us": ([0-9.]*), "ratio": ([0-9.]*).*"regs": (-?[0-9]*).*/\5  \3  \4  \2  \6  \1/' |
    sort -rn; } | tee "$out/summary.txt"
