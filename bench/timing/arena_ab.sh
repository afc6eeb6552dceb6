#!/usr/bin/env bash
# On a GPU host: cuda_reduce_sum's kernel with several parameter sets evaluated RUNS times by each of two
# CUDA evaluators, taking turns (A, B, A, B...), each run a fresh process: the speedup and its interval, the
# candidate's median and the range of its per-block medians (each block on another device arena). Shows
# whether an evaluator's measurement of a kernel moves from one run to the next. One JSON line per run,
# then per evaluator and set the range of the speedups over runs.
#   bash bench/timing/arena_ab.sh base=/path/kiln-eval-cuda new=build-gpu/bin/kiln-eval-cuda > ab.jsonl
#   RUNS=4 SETS="128,1,4 128,1,1 256,4,4" EVAL_ARGS="--min-time 0.3 --max-time 2" bash ...
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: arena_ab.sh NAME=EVALUATOR ..." >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../kernel_build.sh
source "$root/bench/kernel_build.sh"
task="$root/configs/tasks/cuda_reduce_sum"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
with_abi "$work"
build() { nvcc_build "$work" "$@"; }
build -o "$work/reference.so" "$task/reference.cu"
for set in ${SETS:-128,1,4 128,1,1 256,4,4}; do
  IFS=, read -r block vec per_sm <<< "$set"
  name="b${block}_v${vec}_s${per_sm}"
  build -DBLOCK="$block" -DVEC="$vec" -DBLOCKS_PER_SM="$per_sm" -o "$work/$name.so" "$task/kernel.cu"
  for run in $(seq "${RUNS:-4}"); do
    for named in "$@"; do
      who=${named%%=*} evaluator=${named#*=}
      # shellcheck disable=SC2086
      "$evaluator" --task "$task" --kernel "$work/$name.so" --reference "$work/reference.so" \
        --out "$work/out.msgpack" ${EVAL_ARGS:-} > "$work/eval.log" 2>&1 || true
      python3 - "$who" "$name" "$run" "$work/eval.log" <<'PY'
import json, re, sys
who, name, run, log = sys.argv[1], sys.argv[2], int(sys.argv[3]), open(sys.argv[4]).read()
out = {"evaluator": who, "set": name, "run": run}
m = re.search(r"speedup ([0-9.e+-]+)x \[([0-9.e+-]+)x, ([0-9.e+-]+)x\]", log)
if m:
    out.update(speedup=float(m.group(1)), interval=[float(m.group(2)), float(m.group(3))])
m = re.search(r"medians: candidate ([0-9.e+-]+) us, reference ([0-9.e+-]+) us", log)
if m:
    out.update(candidate_us=float(m.group(1)), reference_us=float(m.group(2)))
m = re.search(r"candidate's block medians ([0-9.e+-]+)\.\.([0-9.e+-]+) us", log)
if m:
    out["block_medians_us"] = [float(m.group(1)), float(m.group(2))]
m = re.search(r"candidate's blocks \(median us\): (.*)", log)
if m:
    out["blocks"] = m.group(1)[:600]
if "speedup" not in out:
    out["error"] = (log.strip().splitlines() or ["no output"])[-1][:300]
print(json.dumps(out))
PY
    done
  done
done | tee "$work/ab.jsonl"
python3 - "$work/ab.jsonl" <<'PY'
import json, sys
from collections import defaultdict
runs = defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "speedup" in r:
        runs[(r["evaluator"], r["set"])].append(r["speedup"])
for (who, name), xs in sorted(runs.items()):
    mid = sorted(xs)[len(xs) // 2]
    print(json.dumps({"summary": name, "evaluator": who, "speedups": xs,
                      "range_rel": round((max(xs) - min(xs)) / mid, 4)}))
PY
