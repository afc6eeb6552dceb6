#!/usr/bin/env bash
# On a GPU host, from build-gpu/kit.tar.xz holding the service binaries as well (kiln, kiln-broker, ...):
# `kiln up` with one CUDA tester, a tuner campaign on a bundled CUDA task, and its report. Shows that the
# candidates carry Nsight Compute's profile into the scorer, `kiln best` and the report. Logs, the
# report and the JSON go to $OUT (or ./gpu-out).
#   bash bench/timing/gpu_campaign.sh [TASK] [BUDGET]
set -u
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
root=$PWD
task=${1:-cuda_softmax}
budget=${2:-3}
tar xJf build-gpu/kit.tar.xz
export LD_LIBRARY_PATH=$root/.gpu-rt/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
state=$(mktemp -d)
cat > "$state/kiln.yaml" <<YAML
broker: {bind: "tcp://127.0.0.1:25555", events_bind: "tcp://127.0.0.1:25556", metrics_port: 0}
ingest: {metrics_port: 0}
llm_bridge: {metrics_port: 0}
compiler: {metrics_port: 0, cuda_arch: sm_90}
tester: {backend: cuda, metrics_port: 0, timing: {min_time_s: 0.2, max_time_s: 3}}
scorer: {metrics_port: 0}
promoter: {metrics_port: 0, registry_dir: $state/registry}
up: {compilers: 2, testers: 1}
YAML
kiln="build-gpu/bin/kiln --config $state/kiln.yaml"
$kiln up --state-dir "$state/state" > "$out/up.log" 2>&1 &
up=$!
sleep 5
start=$(date +%s)
timeout 420 $kiln --json submit "configs/tasks/$task" --budget "$budget" --wait --timeout 400 > "$out/submit.json" 2> "$out/submit.err"
echo "submit exit $? after $(( $(date +%s) - start )) s"
cid=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['campaign_id'])" "$out/submit.json")
$kiln --json best "$cid" > "$out/best.json"
$kiln report "$cid" -o "$out/report.html"
python3 - "$out/best.json" <<'PY'
import json, sys
for p in json.load(open(sys.argv[1]))["programs"]:
    prof = [l for l in p["eval_log"].splitlines() if l.startswith("profile")]
    print(p["id"], p["status"], "%.2fx" % p["speedup"], prof[0] if prof else "(no profile)")
PY
echo "report: $(grep -c 'class="profile">dram' "$out/report.html") candidate rows with an ncu profile"
kill "$up"; wait "$up" 2>/dev/null
cp "$state"/state/logs/tester*.log "$out/" 2>/dev/null
