#!/usr/bin/env bash
# A/A on the bundled CUDA tasks: each task's first kernel (kernel.cu, its default parameters) and its
# reference, each timed as its own candidate in RUNS separate kiln-eval-cuda runs with the tester's
# timing (EVAL_ARGS). An A/A speedup is 1.0 by construction, so every interval should hold it: the JSON
# gives each run's speedup, its reported interval and the interval before the reproducibility widening
# (from the evaluator's log), and per kernel how many of each held 1.0 and the largest offset |speedup - 1|.
#   bash bench/timing/aa_tasks.sh KILN_EVAL_CUDA [RUNS] > aa.json
#   ONLY='cuda_sgemm' KINDS=reference bash bench/timing/aa_tasks.sh ...   (some tasks, some kernels)
#   BUDGET_S=120 ...: no run starts after 120 s
#   LOGS=DIR ...: each run's evaluator log kept as DIR/TASK-KERNEL-I.log
set -uo pipefail
eval_bin=$(realpath "${1:?usage: aa_tasks.sh KILN_EVAL_CUDA [RUNS]}")
runs=${2:-3}
root=$(cd "$(dirname "$0")/../.." && pwd)
tasks=${TASKS:-$root/configs/tasks}
nvcc=${NVCC:-nvcc}
arch=${CUDA_ARCH:-sm_90}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for task in $(for p in ${ONLY:-cuda_*}; do echo "$tasks"/$p; done); do
  name=$(basename "$task")
  for kernel in ${KINDS:-kernel reference}; do
    so="$work/$name-$kernel.so"
    if ! "$nvcc" -O3 -shared -Xcompiler -fPIC -cudart shared -arch="$arch" -I"$root/libs/core/include" -o "$so" \
         "$task/$kernel.cu" > "$work/build.log" 2>&1; then
      echo "$name $kernel: build failed: $(tail -1 "$work/build.log")" >&2
      continue
    fi
    for i in $(seq 1 "$runs"); do
      # BUDGET_S: no run starts after that many seconds (the summary below still comes out).
      if [ -n "${BUDGET_S:-}" ] && [ "$SECONDS" -ge "$BUDGET_S" ]; then echo "$name $kernel $i: skipped (BUDGET_S)" >&2; continue; fi
      rm -f "$work/r.msgpack"
      # shellcheck disable=SC2086
      "$eval_bin" --task "$task" --kernel "$so" --reference "$so" --out "$work/r.msgpack" \
        ${EVAL_ARGS:---min-time 0.3 --max-time 2} > /dev/null 2> "$work/err.txt"
      [ -n "${LOGS:-}" ] && mkdir -p "$LOGS" && cp "$work/err.txt" "$LOGS/$name-$kernel-$i.log"
      nums=$(python3 "$root/bench/timing/report_numbers.py" "$work/r.msgpack" 2>/dev/null || echo "")
      # The allowance each median got towards slower (+): the candidate's, then the reference's.
      widen=$(grep -o 'widened for reproducibility and placement by +[0-9.]*/-[0-9.]* us (candidate), +[0-9.]*' "$work/err.txt" |
              grep -o '+[0-9.]*' | tr -d '+' | tr '\n' ' ')
      # The interval the samples alone gave, before the widening (logged with it; absent: none was widened).
      own=$(grep -o "from the samples' own \[[0-9.]*, [0-9.]*\]" "$work/err.txt" | head -1 | grep -o '[0-9.]*' | tr '\n' ' ')
      stop=$(grep -o 'stop: [a-z_]*' "$work/err.txt" | head -1 | cut -d' ' -f2)
      echo "$name $kernel $i: ${nums:-no report} | widened ${widen:-none} | stop ${stop:-none}" >&2
      [ -z "$nums" ] && tail -c 300 "$work/err.txt" >&2
      echo "$name $kernel $i ${stop:-none} ${widen:-0 0 }$nums ${own}"
    done
  done
done > "$work/rows.txt"
python3 - "$work/rows.txt" <<'PY'
import json, sys
out = {"bench": "cuda_aa_tasks", "kernels": []}
rows = [l.split() for l in open(sys.argv[1]) if len(l.split()) >= 11]
for key in sorted({(r[0], r[1]) for r in rows}):
    runs = []
    for r in (r for r in rows if (r[0], r[1]) == key):
        wc, wr, c, ref, s, lo, hi = (float(x) for x in r[4:11])
        raw_lo, raw_hi = (float(x) for x in r[11:13]) if len(r) >= 13 else (lo, hi)
        runs.append({"stop": r[3], "candidate_us": c, "reference_us": ref, "speedup": s, "interval": [lo, hi],
                     "raw_interval": [raw_lo, raw_hi], "widened_us": [wc, wr]})
    out["kernels"].append({"task": key[0], "kernel": key[1], "runs": runs,
                           "holding_1": sum(1 for x in runs if x["interval"][0] <= 1 <= x["interval"][1]),
                           "raw_holding_1": sum(1 for x in runs if x["raw_interval"][0] <= 1 <= x["raw_interval"][1]),
                           "max_offset": max(abs(x["speedup"] - 1) for x in runs)})
print(json.dumps(out, indent=1))
PY
