#!/usr/bin/env bash
# How long `make run` takes a newcomer with the Debian packages already installed: a fresh clone of this
# checkout's HEAD in a temporary folder, `make build-run` (the services, the CLI and the evaluators, from
# an empty build folder) and then `make run` (the demo: every bundled task this machine's testers run).
# The demo gets ports of its own through KILN_* variables, so a Kiln already running here does not stop
# it; nothing else differs from `make run`. Prints JSON (and writes it to OUT, with the demo's output beside
# it as make_run.log):
#   bash bench/run/make_run_time.sh [OUT.json]     (default bench/run/results/make_run.json)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/bench/run/results/make_run.json}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q "$root" "$work/kiln" && git -C "$work/kiln" checkout -q "$(git -C "$root" rev-parse HEAD)" || exit 1
cd "$work/kiln" || exit 1

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export KILN_BROKER_BIND="tcp://127.0.0.1:$(free_port)" KILN_BROKER_EVENTS_BIND="tcp://127.0.0.1:$(free_port)"
for service in BROKER INGEST LLM_BRIDGE COMPILER TESTER SCORER PROMOTER; do export "KILN_${service}_METRICS_PORT=0"; done

load_before=$(cut -d' ' -f1 /proc/loadavg)
t0=$(date +%s.%N)
make build-run > "$work/build.log" 2>&1; build_rc=$?
t1=$(date +%s.%N)
make run > "$work/run.log" 2>&1; run_rc=$?
t2=$(date +%s.%N)
dirty=$(git status --porcelain | wc -l)

python3 - "$out" "$t0" "$t1" "$t2" "$build_rc" "$run_rc" "$dirty" "$load_before" "$work/run.log" <<'PY'
import json, os, re, subprocess, sys
out, t0, t1, t2, build_rc, run_rc, dirty, load, run_log = sys.argv[1:]
t0, t1, t2 = float(t0), float(t1), float(t2)
log = open(run_log, errors="replace").read()
result = {
    "what": "make build-run then make run, fresh clone, packages present",
    "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
    "make_run_s": round(t2 - t0, 1),
    "build_s": round(t1 - t0, 1),
    "demo_s": round(t2 - t1, 1),
    "build_rc": int(build_rc),
    "run_rc": int(run_rc),
    "campaigns": len(re.findall(r"^report: ", log, re.M)),
    "git_status_lines_after": int(dirty),
    "cores": os.cpu_count(),
    "load_avg_1m_before": float(load),
    "load_avg_1m_after": float(open("/proc/loadavg").read().split()[0]),
}
text = json.dumps(result, indent=2)
print(text)
os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
open(out, "w").write(text + "\n")
open(os.path.join(os.path.dirname(os.path.abspath(out)), "make_run.log"), "w").write(log)
if int(build_rc) or int(run_rc):
    sys.stderr.write("make run failed; the last lines of its log:\n" + log[-3000:])
PY
