#!/usr/bin/env bash
# On a GPU host with torch, from build-gpu/kit.tar.xz (bench/timing/make_gpu_kit.sh .gpu-rt services): a
# tuner campaign on each bundled KernelBench-format CUDA problem (configs/kernelbench/*_cuda) through
# `kiln up`, each candidate checked and timed against the problem's reference.py (PyTorch eager) by Kiln's
# protocol; then KernelBench's figures over the problems: how many have a correct kernel, fast_1 (correct
# and faster than eager) by the median and by the 95 % interval's lower bound, and the geometric mean of
# the best speedups. Writes $OUT/kernelbench_h200.json beside bench/pytorch/gpu_vs_torch.sh's files.
#   PYTHON=/path/to/python3 bash bench/kernelbench/gpu_campaigns.sh [BUDGET] [PROBLEM ...]
set -u
out=${OUT:-$PWD/gpu-out}
budget=${1:-8}
shift || true
problems=("$@")
[ ${#problems[@]} -gt 0 ] || problems=(configs/kernelbench/*_cuda)
OUT=$out bash "$(dirname "$0")/../pytorch/gpu_vs_torch.sh" "$budget" "${problems[@]}"
python3 - "$out" <<'PY'
import glob, json, math, sys
out = sys.argv[1]
rows = json.load(open(out + "/vs_torch.json"))
problems = []
overheads = []
for f in sorted(glob.glob(out + "/best_*.json")):
    d = json.load(open(f))
    progs = [p for p in d["programs"] if p["status"] != "no_code"]  # no_code: the tuner's space was spent
    for p in progs:
        m = p.get("eval_metadata", {})
        if "eval_start_s" in m:
            overheads.append({k: float(v) for k, v in m.items() if k.startswith("eval_start") or k in (
                "eval_child_s", "eval_teardown_s", "eval_exclusive_s")})
    correct = [p for p in progs if p["status"] == "ok"]
    name = d["campaign"].get("task") or (progs[0]["task"]["name"] if progs else f)
    row = {"problem": name, "scored": len(progs), "correct": len(correct)}
    if correct:
        best = max(correct, key=lambda p: p["speedup"])
        case = best["cases"][0]
        row.update({"program": best["id"], "params": best["params"], "dims": case["dims"],
                    "kernel_us": case["median_us"], "eager_us": case["reference_median_us"],
                    "speedup_vs_eager": case["speedup"], "interval": case["speedup_interval"]})
    problems.append(row)
n = len(problems)
ok = [r for r in problems if "speedup_vs_eager" in r]
summary = {
    "problems": n,
    "with_a_correct_kernel": len(ok),
    "fast_1_median": sum(1 for r in ok if r["speedup_vs_eager"] > 1) / n if n else 0,
    "fast_1_interval": sum(1 for r in ok if r["interval"][0] > 1) / n if n else 0,
    "geomean_speedup_vs_eager": math.exp(sum(math.log(r["speedup_vs_eager"]) for r in ok) / len(ok)) if ok else 0,
}
if overheads:
    keys = sorted(set().union(*overheads))
    summary["mean_eval_phase_s"] = {k: round(sum(o.get(k, 0) for o in overheads) / len(overheads), 3) for k in keys}
for r in problems:
    if "speedup_vs_eager" in r:
        print("%-24s %2d/%-2d correct  best %9.1f us  eager %9.1f us  %.2fx [%.2f, %.2f]" % (
            r["problem"], r["correct"], r["scored"], r["kernel_us"], r["eager_us"], r["speedup_vs_eager"], *r["interval"]))
    else:
        print("%-24s %2d/%-2d correct" % (r["problem"], r["correct"], r["scored"]))
print(json.dumps(summary, indent=1))
json.dump({"summary": summary, "problems": problems}, open(out + "/kernelbench_h200.json", "w"), indent=2)
PY
# Everything in one file too (a host that hands back few files gets them all).
tar czf "$out/campaigns.tar.gz" -C "$out" $(cd "$out" && ls best_*.json vs_torch.json kernelbench_h200.json 2>/dev/null)
