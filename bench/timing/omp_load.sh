#!/usr/bin/env bash
# OpenMP kernels on a loaded CPU: the bundled rmsnorm task's kernel with THREADS=2 (as the tuner may pick
# it), timed by kiln-eval against its reference on a quiet machine and with as many busy processes as
# cores, each both ways: with OpenMP's defaults (idle threads spin) and with the settings the tester gives
# every CPU contestant (tester::openmp_env: passive wait, one thread per core, bound). Prints JSON.
#   bash bench/timing/omp_load.sh [BUILD] [RUNS]   (BUILD: the build folder, default build)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-build}
runs=${2:-3}
eval_bin="$root/$build/bin/kiln-eval"
task="$root/configs/tasks/rmsnorm"
work=$(mktemp -d)
trap 'rm -rf "$work"; kill $(jobs -p) 2>/dev/null' EXIT
flags=(-O3 -march=native -fopenmp -shared -fPIC -std=c++17 -I"$root/libs/core/include" -DTHREADS=2 -DVEC=8)
g++ "${flags[@]}" -o "$work/kernel.so" "$task/kernel.cpp" || exit 1
g++ "${flags[@]}" -o "$work/reference.so" "$task/reference.cpp" || exit 1
cores=$(nproc)
omp_env=(OMP_WAIT_POLICY=passive OMP_DYNAMIC=false OMP_NUM_THREADS=$cores OMP_PROC_BIND=close OMP_PLACES=cores)

measure() {  # $1: label; the rest: env assignments
  local label=$1; shift
  for i in $(seq 1 "$runs"); do
    rm -f "$work/r.msgpack"
    env -i PATH=/usr/bin:/bin "$@" "$eval_bin" --task "$task" --kernel "$work/kernel.so" \
      --reference "$work/reference.so" --out "$work/r.msgpack" --min-time 1 --max-time 3 > /dev/null 2> "$work/err.txt"
    echo "$label $(python3 "$root/bench/timing/report_numbers.py" "$work/r.msgpack" 2>/dev/null || echo failed)"
  done
}

{
  measure quiet_default
  measure quiet_tester "${omp_env[@]}"
  for _ in $(seq 1 "$cores"); do (while :; do :; done) & done
  sleep 1
  measure loaded_default
  measure loaded_tester "${omp_env[@]}"
  kill $(jobs -p) 2>/dev/null
} > "$work/rows.txt"
python3 - "$work/rows.txt" "$cores" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) >= 4 and f[1] != "failed":
        rows.setdefault(f[0], []).append({"candidate_us": float(f[1]), "reference_us": float(f[2]), "speedup": float(f[3])})
out = {"bench": "omp_load", "task": "rmsnorm THREADS=2 VEC=8", "cores": int(sys.argv[2]), "runs": rows}
med = {k: statistics.median(r["candidate_us"] for r in v) for k, v in rows.items()}
out["median_candidate_us"] = med
for how in ("default", "tester"):
    q, l = med.get("quiet_" + how), med.get("loaded_" + how)
    if q and l:
        out[f"loaded_over_quiet_{how}"] = round(l / q, 3)
print(json.dumps(out, indent=1))
PY
