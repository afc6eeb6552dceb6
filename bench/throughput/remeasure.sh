#!/usr/bin/env bash
# Re-measures every kernel of a verified-kernel registry in an independent evaluator run: its source from
# the registry, built as the compiler builds it (g++ or nvcc, the registry's parameters as -D), against the
# task's reference from TASKS_DIR/<task_name>, by kiln-eval (cpp) or kiln-eval-cuda (cuda) with the
# tester's default timing. Prints one JSON line per kernel and a summary; exits 1 when any case's speedup
# moved by more than TOL (default 0.03) from what the registry states, 2 on a kernel that could not be
# re-measured. Each case also says whether the re-measured speedup lies in the registry's interval, and
# the summary counts the kernels with a case outside it.
#   bash bench/throughput/remeasure.sh REGISTRY_DIR TASKS_DIR [BIN_DIR]
#   TOL=0.03 CUDA_ARCH=sm_90 EVAL_ARGS="--min-time 0.5" bash bench/throughput/remeasure.sh ...
# EVAL_WRAP="taskset -c 0-3": a command the evaluator runs under. LOGS=dir: each evaluator's log kept there as <kernel_id>.log. ONLY=regex: only the kernels of the tasks it matches. LOAD=N (CUDA): under a campaign's conditions, N
# evaluators beside the one measuring, each evaluating the other CUDA tasks' first kernels over and over,
# all of them taking turns on one device lock as a tester's slots do (a timed case holds it alone).
set -uo pipefail
reg=${1:?usage: remeasure.sh REGISTRY_DIR TASKS_DIR [BIN_DIR]}
tasks=${2:?usage: remeasure.sh REGISTRY_DIR TASKS_DIR [BIN_DIR]}
bin=${3:-$(cd "$(dirname "$0")/../.." && pwd)/build/bin}
root=$(cd "$(dirname "$0")/../.." && pwd)
tol=${TOL:-0.03}
# shellcheck source=../kernel_build.sh
source "$root/bench/kernel_build.sh"  # with_abi, nvcc_build, gxx_build; arch and nvcc from CUDA_ARCH, NVCC
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$reg/verified_kernels.json" > "$work/entries.tsv" <<'PY'
import json, sys
for e in json.load(open(sys.argv[1]))["kernels"]:
    params = " ".join("-D%s=%s" % kv for kv in sorted(e.get("params", {}).items()))
    # shape=speedup/candidate_us/reference_us/lo/hi per case: the registry's medians, to tell which side
    # moved, and its interval
    cases = ";".join("%s=%r/%r/%r/%r/%r" % (",".join("%s=%s" % kv for kv in sorted(c["dims"].items())), c["speedup"],
                                             c.get("candidate_latency_us", 0), c.get("baseline_latency_us", 0),
                                             *(c.get("speedup_interval") or [0, 0]))
                     for c in e["cases"])
    # the registered candidate's spread (the entry's first case): p10/p90/cv
    t = e.get("timing", {}).get("candidate", {})
    spread = "%r/%r/%r" % (t.get("p10_us", 0), t.get("p90_us", 0), t.get("cv", 0))
    print("\t".join([e["kernel_id"], e["language"], e["task_name"], e["source_path"], params, cases, spread]))
PY
if [ -n "${ONLY:-}" ]; then
  awk -F'\t' -v only="$ONLY" '$3 ~ only' "$work/entries.tsv" > "$work/only.tsv" && mv "$work/only.tsv" "$work/entries.tsv"
fi
lock_args=()
if [ "${LOAD:-0}" -gt 0 ]; then
  lock_args=(--device-lock "$work/device.lock")
  load="$work/load"
  loaded=()
  for t in "$tasks"/*/; do
    t=${t%/}
    grep -qE '^backend: *cuda' "$t/task.yaml" 2>/dev/null || continue
    name=$(basename "$t")
    cut -f3 "$work/entries.tsv" | grep -qx "$name" && continue  # not a task being measured
    with_abi "$load/$name"
    if nvcc_build "$load/$name" -o "$load/$name/kernel.so" "$t/kernel.cu" > /dev/null 2>&1 &&
       nvcc_build "$load/$name" -o "$load/$name/reference.so" "$t/reference.cu" > /dev/null 2>&1; then
      loaded+=("$t")
    fi
  done
  [ "${#loaded[@]}" -gt 0 ] || { echo '{"error": "LOAD: no other CUDA task to load the device with"}'; exit 2; }
  for i in $(seq "$LOAD"); do
    (
      k=$i
      while [ ! -e "$load/stop" ]; do
        t=${loaded[$((k % ${#loaded[@]}))]}
        name=$(basename "$t")
        "$bin/kiln-eval-cuda" --task "$t" --kernel "$load/$name/kernel.so" --reference "$load/$name/reference.so" \
          --out "$load/$name-$i.msgpack" "${lock_args[@]}" > /dev/null 2>&1
        k=$((k + 1))
      done
    ) &
  done
  trap 'touch "$load/stop"; wait; rm -rf "$work"' EXIT
fi
failed=0 unmeasured=0 n=0
while IFS=$'\t' read -r id lang task source params cases spread; do
  n=$((n + 1))
  dir="$work/$id"
  if [ ! -d "$tasks/$task" ]; then echo "{\"kernel_id\": \"$id\", \"error\": \"no task $task under $tasks\"}"; unmeasured=$((unmeasured + 1)); continue; fi
  mkdir -p "$dir/task"
  cp -r "$tasks/$task/." "$dir/task/"
  with_abi "$dir"
  if [ "$lang" = cuda ]; then
    ext=cu evaluator="$bin/kiln-eval-cuda"
    build() { nvcc_build "$dir" "$@"; }
  else
    ext=cpp evaluator="$bin/kiln-eval"
    build() { gxx_build "$dir" "$@"; }
  fi
  cp "$reg/$source" "$dir/kernel.$ext"
  # shellcheck disable=SC2086
  if ! build $params -o "$dir/kernel.so" "$dir/kernel.$ext" > "$dir/build.log" 2>&1 ||
     ! build -o "$dir/reference.so" "$dir/task/reference.$ext" >> "$dir/build.log" 2>&1; then
    echo "{\"kernel_id\": \"$id\", \"error\": \"build failed: $(tail -1 "$dir/build.log" | tr -d '"\\')\"}"; unmeasured=$((unmeasured + 1)); continue
  fi
  # shellcheck disable=SC2086
  ${EVAL_WRAP:-} "$evaluator" --task "$dir/task" --kernel "$dir/kernel.so" --reference "$dir/reference.so" --out "$dir/result.msgpack" \
    ${EVAL_ARGS:-} "${lock_args[@]}" > "$dir/eval.log" 2>&1
  [ -z "${LOGS:-}" ] || { mkdir -p "$LOGS" && cp "$dir/eval.log" "$LOGS/$id.log"; }
  python3 - "$id" "$cases" "$tol" "$dir/eval.log" "$spread" "$work/outside.txt" <<'PY'
import json, re, sys
kid, cases, tol, log = sys.argv[1], sys.argv[2], float(sys.argv[3]), open(sys.argv[4]).read()
registered_spread = [float(v) for v in sys.argv[5].split("/")] if len(sys.argv) > 5 and sys.argv[5] else []
registered, medians, intervals = {}, {}, {}
for c in cases.split(";"):
    shape, value = c.rsplit("=", 1)
    speedup, cand_us, ref_us, lo, hi = (float(v) for v in value.split("/"))
    registered[shape] = speedup
    medians[shape] = (cand_us, ref_us)
    intervals[shape] = (lo, hi)
# The evaluator's medians line: "...: B=8192,H=8192: medians: candidate 74.2 us, reference 2697.8 us"
remeasured_medians = {m.group(1): (float(m.group(2)), float(m.group(3)))
                      for m in re.finditer(r"([A-Za-z0-9_=,]+): medians: candidate ([0-9.e+-]+) us, reference ([0-9.e+-]+) us", log)}
# "...; candidate right after the reference 131.2 us, after itself 130.9 us": the order's wake, if any.
orders = {m.group(1): [float(m.group(2)), float(m.group(3))]
          for m in re.finditer(r"([A-Za-z0-9_=,]+): medians: .*?candidate right after the reference ([0-9.e+-]+) us, after itself ([0-9.e+-]+) us", log)}
# "...; candidate's block medians 129.5..220.1 us": each block on its own processes and buffers.
block_ranges = {m.group(1): [float(m.group(2)), float(m.group(3))]
                for m in re.finditer(r"([A-Za-z0-9_=,]+): medians: .*?candidate's block medians ([0-9.e+-]+)\.\.([0-9.e+-]+) us", log)}
# "...; p10..p90: candidate 129.2..217.8 us (cv 0.246), reference ...": the candidate's spread, re-measured.
spreads = {m.group(1): [float(m.group(2)), float(m.group(3)), float(m.group(4))]
           for m in re.finditer(r"([A-Za-z0-9_=,]+): medians: .*? p10\.\.p90: candidate ([0-9.e+-]+)\.\.([0-9.e+-]+) us \(cv ([0-9.e+-]+)\)", log)}
# The evaluator's verdict line: "... speedup 36.4x [35.9x, 36.8x] on B=8192,H=8192; speedup ... on ..."
measured = {m.group(4): (float(m.group(1)), float(m.group(2)), float(m.group(3)))
            for m in re.finditer(r"speedup ([0-9.e+-]+)x \[([0-9.e+-]+)x, ([0-9.e+-]+)x\] on ([A-Za-z0-9_=,]+)", log)}
out = {"kernel_id": kid, "cases": []}
ok = bool(measured) and all(s in measured for s in registered)
for shape, reg in registered.items():
    if shape not in measured:
        out["cases"].append({"shape": shape, "registered": reg, "error": "not measured"})
        continue
    x, lo, hi = measured[shape]
    moved = x / reg - 1
    case = {"shape": shape, "registered": reg, "remeasured": x, "interval": [lo, hi], "moved": round(moved, 4)}
    # Whether the re-measured speedup lies in the interval the registry states (what it claims: a kernel
    # whose time depends on the memory it got moves by more than TOL and stays inside it).
    reg_lo, reg_hi = intervals[shape]
    if reg_hi > 0:
        case["registered_interval"] = [reg_lo, reg_hi]
        case["inside_registered_interval"] = reg_lo <= x <= reg_hi
        if not case["inside_registered_interval"]:
            with open(sys.argv[6], "a") as f:
                f.write(kid + "\n")
    if shape in remeasured_medians:
        # Each side's median, registered -> re-measured: which one moved when the ratio did.
        (c0, r0), (c1, r1) = medians[shape], remeasured_medians[shape]
        case["candidate_us"] = [round(c0, 3), c1]
        case["reference_us"] = [round(r0, 3), r1]
    if shape in block_ranges:
        case["candidate_block_medians_us"] = block_ranges[shape]
    if shape in orders:
        case["candidate_us_after_reference_after_itself"] = orders[shape]
    if shape in spreads:
        # p10, p90 (us) and cv of the candidate's samples: the registry's (its first case), re-measured
        case["candidate_p10_p90_cv"] = [registered_spread, spreads[shape]]
    out["cases"].append(case)
    ok = ok and abs(moved) <= tol
out["within_tolerance"] = ok
if not measured:
    out["error"] = (log.strip().splitlines() or ["no output"])[-1]
print(json.dumps(out))
sys.exit(0 if ok else (2 if not measured else 1))
PY
  case $? in 0) ;; 1) failed=$((failed + 1)) ;; *) unmeasured=$((unmeasured + 1)) ;; esac
done < "$work/entries.tsv"
outside=$(sort -u "$work/outside.txt" 2>/dev/null | grep -c . || true)
echo "{\"kernels\": $n, \"moved_more_than_tol\": $failed, \"outside_registered_interval\": ${outside:-0}, \"not_remeasured\": $unmeasured, \"tol\": $tol, \"load\": ${LOAD:-0}}"
[ "$unmeasured" -eq 0 ] || exit 2
[ "$failed" -eq 0 ] || exit 1
