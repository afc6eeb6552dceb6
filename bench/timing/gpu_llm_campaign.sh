#!/usr/bin/env bash
# On a GPU host, from build-gpu/kit.tar.xz holding the service binaries (make_gpu_kit.sh .gpu-rt services):
# an LLM campaign through `kiln up` (one CUDA tester with 4 slots, Nsight Compute on) against a stand-in
# OpenAI-compatible server that records every prompt and answers with the parent's editable region plus a
# comment. Then reads every prompt back: how many were written before their parent was evaluated ("not
# evaluated yet"), and whether each prompt whose parent was correct carries that parent's profile line.
# Prompts, logs and the summary (llm_prompts.json) go to $OUT (or ./gpu-out).
#   bash bench/timing/gpu_llm_campaign.sh [TASK] [BUDGET] [PROFILE_SCOPE]
set -u
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
root=$PWD
task=${1:-cuda_softmax}
budget=${2:-6}
scope=${3:-all}
tar xJf build-gpu/kit.tar.xz
export LD_LIBRARY_PATH=$root/.gpu-rt/lib:/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
state=$(mktemp -d)
port=28080

# The stand-in model: records the request, answers with the current kernel's region and a comment.
cat > "$state/standin.py" <<'PY'
import http.server, json, re, sys, threading
log = open(sys.argv[2], "a")
lock = threading.Lock()
count = [0]
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        msgs = body.get("messages", [])
        text = "\n".join(m.get("content", "") for m in msgs)
        with lock:
            count[0] += 1
            n = count[0]
            log.write(json.dumps(body) + "\n"); log.flush()
        if "strategy section" in (msgs[0].get("content", "") if msgs else ""):
            content = "## Strategy\nFuse the passes; keep loads coalesced."
        else:
            cur = text.split("## Current kernel", 1)[-1]
            m = re.search(r"// \[EVOLVE_START\]\n(.*?)// \[EVOLVE_END\]", cur, re.S)
            region = m.group(1) if m else ""
            content = "```cuda\n// [EVOLVE_START]\n" + region + "// stand-in edit %d\n// [EVOLVE_END]\n```\n" % n
        out = {"id": "standin", "object": "chat.completion",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": len(text) // 4, "completion_tokens": 50, "total_tokens": len(text) // 4 + 50}}
        data = json.dumps(out).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
python3 "$state/standin.py" $port "$out/prompts.jsonl" &
standin=$!

cat > "$state/kiln.yaml" <<YAML
broker: {bind: "tcp://127.0.0.1:25555", events_bind: "tcp://127.0.0.1:25556", metrics_port: 0}
ingest: {metrics_port: 0}
llm_bridge: {metrics_port: 0}
compiler: {metrics_port: 0, cuda_arch: sm_90}
tester: {backend: cuda, metrics_port: 0, slots: 4, profile: ncu, profile_scope: $scope, timing: {min_time_s: 0.2, max_time_s: 3}}
scorer: {metrics_port: 0}
promoter: {metrics_port: 0, registry_dir: $state/registry}
llm: {base_url: "http://127.0.0.1:$port/v1", model: stand-in, max_retries: 0}
up: {compilers: 2, testers: 1}
YAML
kiln="build-gpu/bin/kiln --config $state/kiln.yaml"
OPENAI_API_KEY=stand-in $kiln up --state-dir "$state/state" > "$out/up.log" 2>&1 &
up=$!
sleep 5
start=$(date +%s)
timeout 480 $kiln --json submit "configs/tasks/$task" --proposer llm --budget "$budget" --wait --timeout 460 \
  > "$out/submit.json" 2> "$out/submit.err"
echo "submit exit $? after $(( $(date +%s) - start )) s"
cid=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['campaign_id'])" "$out/submit.json")
$kiln --json best "$cid" --top 100 > "$out/best.json"
python3 - "$out/prompts.jsonl" "$out/best.json" "$out/llm_prompts.json" <<'PY'
import json, re, sys
prompts = [json.loads(l) for l in open(sys.argv[1])]
programs = {p["id"]: p for p in json.load(open(sys.argv[2]))["programs"]}
rows = []
for body in prompts:
    msgs = body.get("messages", [])
    if msgs and "strategy section" in msgs[0].get("content", ""):
        continue
    user = msgs[-1].get("content", "") if msgs else ""
    m = re.search(r"## Current kernel \(([^,)]+)", user)
    parent = m.group(1) if m else "?"
    fb = user.split("## Feedback on the current kernel", 1)[-1].split("\n## ", 1)[0]
    p = programs.get(parent, {})
    rows.append({"parent": parent, "not_evaluated_yet": "(not evaluated yet)" in fb,
                 "parent_status": p.get("status", "?"), "parent_correct": p.get("status") == "ok",
                 "profile_line": next((l for l in fb.splitlines() if l.startswith("profile on")), ""),
                 "profile_skipped": next((l for l in fb.splitlines() if l.startswith("profiling skipped")), "")})
summary = {"kernel_prompts": len(rows),
           "not_evaluated_yet": sum(r["not_evaluated_yet"] for r in rows),
           "parent_correct": sum(r["parent_correct"] for r in rows),
           "parent_correct_with_profile": sum(bool(r["profile_line"]) for r in rows if r["parent_correct"]),
           "programs": len(programs),
           "programs_profiled": sum(1 for p in programs.values() if "profile on" in p.get("eval_log", "")),
           "prompts": rows}
json.dump(summary, open(sys.argv[3], "w"), indent=1)
print(json.dumps({k: v for k, v in summary.items() if k != "prompts"}))
for r in rows:
    print(f"  parent {r['parent']:<28} {r['parent_status']:<10} not-evaluated-yet={r['not_evaluated_yet']!s:<5} "
          f"{(r['profile_line'] or r['profile_skipped'])[:110]}")
PY
grep -h "profiling" "$state/state/logs/tester"*.log 2>/dev/null | cut -c1-200 | head -20
kill $up
kill $standin 2>/dev/null
wait 2>/dev/null
