#!/usr/bin/env bash
# On a GPU host: cuda_reduce_sum's kernel with several parameter sets, each timed by kiln-arena-probe in
# ARENAS separate device allocations per process, PROCS processes per allocation mode. One JSON line per
# arena (kernel, mode, process, where the allocation sits, median and spread), then a summary per kernel
# and mode: the spread of arena medians within a process and of process means between processes.
#   bash bench/timing/arena_probe.sh BIN_DIR > arenas.jsonl
#   MODES="malloc ipc" PROCS=3 ARENAS=16 ROUNDS=20 SETS="128,1,1 128,1,4 256,4,4" bash ...
set -euo pipefail
bin=${1:?usage: arena_probe.sh BIN_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../kernel_build.sh
source "$root/bench/kernel_build.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
with_abi "$work"
for set in ${SETS:-128,1,1 128,1,4 256,4,4}; do
  IFS=, read -r block vec per_sm <<< "$set"
  name="b${block}_v${vec}_s${per_sm}"
  nvcc_build "$work" -DBLOCK="$block" -DVEC="$vec" -DBLOCKS_PER_SM="$per_sm" \
    "$root/configs/tasks/cuda_reduce_sum/kernel.cu" -o "$work/$name.so"
  for mode in ${MODES:-malloc malloc2m vmm ipc}; do
    for p in $(seq "${PROCS:-3}"); do
      "$bin/kiln-arena-probe" --kernel "$work/$name.so" --mode "$mode" --arenas "${ARENAS:-16}" \
        --rounds "${ROUNDS:-20}" --bytes "${BYTES:-537133056}" | sed "s/^{/{\"kernel\":\"$name\",\"proc\":$p,/"
    done
  done
done > "$work/arenas.jsonl"
cat "$work/arenas.jsonl"
python3 - "$work/arenas.jsonl" <<'PY'
import json, statistics, sys
from collections import defaultdict
rows = [json.loads(l) for l in open(sys.argv[1])]
groups = defaultdict(lambda: defaultdict(list))
for r in rows:
    groups[(r["kernel"], r["mode"])][r["proc"]].append(r["median_us"])
for (kernel, mode), procs in sorted(groups.items()):
    means = [statistics.mean(v) for v in procs.values()]
    within = [(max(v) - min(v)) / statistics.median(v) for v in procs.values()]
    print(json.dumps({"summary": kernel, "mode": mode,
                      "arena_medians_us": [sorted(round(x, 1) for x in v) for v in procs.values()],
                      "within_process_range_rel": [round(w, 3) for w in within],
                      "process_means_us": [round(m, 1) for m in means],
                      "between_process_range_rel": round((max(means) - min(means)) / statistics.median(means), 4)}))
PY
