#!/usr/bin/env bash
# On a GPU host with torch, from build-gpu/kit.tar.xz holding the service binaries (make_gpu_kit.sh
# services): `kiln up` with one CUDA tester whose Python has torch, a tuner campaign on each bundled CUDA
# task, and for each campaign's best program its speedup against the task's reference and against every
# baseline the task names (torch_eager on all five, cublas_sgemm on sgemm), each with its 95 % interval,
# all measured by Kiln's protocol in the same runs. Then (COMPILE=1, the default) each best program once
# more, alone: a copy of its task package whose parameter lists hold only the best's values and whose
# baselines add torch_compile, submitted with budget 0, so that the candidate, eager PyTorch, torch.compile
# (and cuBLAS) are timed in one evaluation (torch.compile compiles in every evaluation that names it: too
# slow for every candidate of a campaign; added where the task names torch_eager). Writes
# $OUT/vs_torch.json (and the logs).
#   PYTHON=/path/to/python3 bash bench/pytorch/gpu_vs_torch.sh [BUDGET] [TASK | PACKAGE_DIR ...]
# BACKEND=cpu BIN=build/bin runs the same on the CPU tasks named, with the binaries of a build here (no kit):
# what a check of the script itself needs (CPU tasks name no torch baseline, so the pinned run adds none).
set -u
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
budget=${1:-6}
shift || true
tasks=("$@")
[ ${#tasks[@]} -gt 0 ] || tasks=(cuda_reduce_sum cuda_rmsnorm cuda_sgemm cuda_softmax cuda_transpose)
python=${PYTHON:-python3}
backend=${BACKEND:-cuda}
bin=${BIN:-build-gpu/bin}
[ -n "${BIN:-}" ] || tar xJf build-gpu/kit.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu-rt/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
state=$(mktemp -d)
cat > "$state/kiln.yaml" <<YAML
broker: {bind: "tcp://127.0.0.1:25555", events_bind: "tcp://127.0.0.1:25556", metrics_port: 0}
ingest: {metrics_port: 0}
llm_bridge: {metrics_port: 0}
compiler: {metrics_port: 0, cuda_arch: sm_90}
tester: {backend: $backend, metrics_port: 0, python: "$python", profile: "off", timing: {min_time_s: 0.3, max_time_s: 3}}
scorer: {metrics_port: 0}
promoter: {metrics_port: 0, registry_dir: $state/registry}
up: {compilers: 4, testers: 1}
YAML
kiln="$bin/kiln --config $state/kiln.yaml"
$kiln up --state-dir "$state/state" > "$out/up.log" 2>&1 &
up=$!
sleep 5
dirs=()  # a package's folder as given, a bundled task's name as its folder
for t in "${tasks[@]}"; do
  if [[ "$t" == */* ]]; then dirs+=("$t"); else dirs+=("configs/tasks/$t"); fi
done
# Submits package folder $1 with budget $2 and prints the campaign's id.
submit() {
  $kiln --json submit "$1" --budget "$2" 2>> "$out/submit.err" |
    python3 -c "import json,sys; d=json.load(sys.stdin); print((d[0] if isinstance(d, list) else d)['campaign_id'])"
}
start=$(date +%s)
ids=()
for dir in "${dirs[@]}"; do ids+=("$(submit "$dir" "$budget")"); done
# Waits for each campaign named and keeps its `kiln best` answer as $out/best_<campaign>.json.
wait_done() {
  local cid state_now
  for cid in "$@"; do
    for _ in $(seq 1 500); do
      state_now=$($kiln --json best "$cid" 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['campaign']['state'])" 2>/dev/null)
      [ "$state_now" = done ] && break
      sleep 2
    done
    $kiln --json best "$cid" > "$out/best_$cid.json"
  done
}
wait_done "${ids[@]}"
echo "campaigns done after $(( $(date +%s) - start )) s"
python3 - "$out" "${ids[@]}" <<'PY'
import json, sys
out, ids = sys.argv[1], sys.argv[2:]
rows = []
for cid in ids:
    d = json.load(open("%s/best_%s.json" % (out, cid)))
    progs = [p for p in d["programs"] if p["status"] == "ok" or p.get("perf_score") == 5]
    if not progs:
        rows.append({"campaign": cid, "task": d["campaign"].get("task"), "best": None}); continue
    best = max(progs, key=lambda p: p["speedup"])
    case = best["cases"][0]
    row = {"campaign": cid, "task": best["task"]["name"], "program": best["id"], "params": best["params"],
           "dims": case["dims"], "candidate_median_us": case["median_us"],
           "reference_median_us": case["reference_median_us"],
           "speedup_vs_reference": case["speedup"], "interval_vs_reference": case["speedup_interval"],
           "baselines": case.get("baselines", []), "eval_metadata": best.get("eval_metadata", {})}
    rows.append(row)
    line = "%-16s best %-20s %9.1f us  vs reference %.2fx [%.2f, %.2f]" % (
        row["task"], best["id"].split("/")[-1], case["median_us"], case["speedup"], *case["speedup_interval"])
    for b in row["baselines"]:
        line += "  vs %s (%.1f us) %.2fx [%.2f, %.2f]" % (b["name"], b["median_us"], b["speedup"], *b["speedup_interval"])
    print(line)
json.dump(rows, open("%s/vs_torch.json" % out, "w"), indent=2)
PY

# Phase two: each best program pinned (its package with one value per parameter, torch_compile added to
# the baselines), program 0 only. The rows gain `pinned`: the same fields from that one evaluation.
if [ "${COMPILE:-1}" = 1 ]; then
  pins=()
  for i in "${!dirs[@]}"; do
    pin="$state/pin/$(basename "${dirs[$i]}")"
    mkdir -p "$state/pin" && cp -r "${dirs[$i]}" "$pin"
    # The best's parameters, from its row of vs_torch.json (none where the campaign had no correct program).
    if python3 - "$out/vs_torch.json" "${ids[$i]}" "$pin/task.yaml" <<'PY'
import json, re, sys
rows_file, campaign, yaml_file = sys.argv[1:]
params = next((r.get("params") for r in json.load(open(rows_file)) if r["campaign"] == campaign), None)
if params is None:
    sys.exit(1)
lines, out, in_params = open(yaml_file).read().split("\n"), [], False
for line in lines:
    m = re.match(r"^  ([A-Za-z_][A-Za-z0-9_]*): \[.*\]\s*$", line)
    if line.startswith("params:"):
        in_params = True
    elif in_params and m and m.group(1) in params:
        line = "  %s: [%s]" % (m.group(1), params[m.group(1)])
    elif not line.startswith(" "):
        in_params = False
    if line.startswith("baselines:"):
        names = [n.strip() for n in line.split("[", 1)[1].rsplit("]", 1)[0].split(",") if n.strip()]
        # torch.compile beside eager PyTorch: the task's reference.py is the module both run.
        if "torch_eager" in names and "torch_compile" not in names:
            names.append("torch_compile")
        line = "baselines: [%s]" % ", ".join(names)
    out.append(line)
open(yaml_file, "w").write("\n".join(out))
PY
    then
      pins+=("${ids[$i]}=$(submit "$pin" 0)")
    fi
  done
  start=$(date +%s)
  wait_done "${pins[@]#*=}"
  echo "pinned evaluations done after $(( $(date +%s) - start )) s"
  python3 - "$out" "${pins[@]}" <<'PY'
import json, sys
out, pins = sys.argv[1], dict(p.split("=", 1) for p in sys.argv[2:])
rows = json.load(open("%s/vs_torch.json" % out))
for row in rows:
    pin = pins.get(row["campaign"])
    if not pin:
        continue
    d = json.load(open("%s/best_%s.json" % (out, pin)))
    p0 = d["programs"][0] if d["programs"] else None
    if not p0 or not p0.get("cases"):
        row["pinned"] = {"campaign": pin, "status": p0["status"] if p0 else "missing"}
        continue
    case = p0["cases"][0]
    row["pinned"] = {"campaign": pin, "status": p0["status"], "params": p0["params"],
                     "candidate_median_us": case["median_us"], "speedup_vs_reference": case["speedup"],
                     "baselines": case.get("baselines", [])}
    line = "%-16s pinned %9.1f us" % (row["task"], case["median_us"])
    for b in row["pinned"]["baselines"]:
        line += "  vs %s (%.1f us) %.2fx [%.2f, %.2f]" % (b["name"], b["median_us"], b["speedup"], *b["speedup_interval"])
    print(line)
json.dump(rows, open("%s/vs_torch.json" % out, "w"), indent=2)
PY
fi
kill "$up"; wait "$up" 2>/dev/null
cp "$state"/state/logs/tester*.log "$out/" 2>/dev/null
