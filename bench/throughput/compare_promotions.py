#!/usr/bin/env python3
"""Two verified-kernel registries of runs that tried the same candidates (bench runs under one
--campaign-prefix that finished their budgets), side by side: per task, the parameter sets each promoted
and the best promoted speedup (lowest case). A run "keeps up" on a task when its best promoted speedup
is at least the other's times (1 - TOL), or when it promoted the same best parameter set.

    python3 bench/throughput/compare_promotions.py SCREENED_REGISTRY FULL_REGISTRY [TOL] [FIRST.json SECOND.json]

With the two runs' bench JSON (kiln-bench-multigpu --out), a task where the first run falls behind also
shows how the first run measured the second's best parameter set (its stop reason and interval: screened
out, or measured lower). Prints one JSON line per task and a summary line; exits 1 when the first run does
not keep up somewhere.
"""
import json
import sys


def promoted(registry):
    by_task = {}
    for e in json.load(open(registry + "/verified_kernels.json"))["kernels"]:
        speedup = min(c["speedup"] for c in e["cases"])
        params = tuple(sorted(e.get("params", {}).items()))
        by_task.setdefault(e["task_name"], []).append((speedup, params))
    return by_task


def measurements(bench_json):
    """{(task, params): [measurement]} from a bench JSON's evaluations; program ids are
    "<prefix>.<task folder>/p3" under --campaign-prefix, and the folder is the registry's task_name."""
    out = {}
    for run in json.load(open(bench_json))["runs"]:
        for e in run.get("evaluations", []):
            key = tuple(sorted(e.get("params", {}).items()))
            task = e["program_id"].split("/")[0].split(".")[-1]
            out.setdefault((task, key), []).append({"purpose": e["purpose"], "status": e["status"], "cases": e["cases"]})
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    a, b = promoted(sys.argv[1]), promoted(sys.argv[2])
    tol = float(sys.argv[3]) if len(sys.argv) > 3 else 0.03
    evals = measurements(sys.argv[4]) if len(sys.argv) > 5 else None
    behind = 0
    for task in sorted(set(a) | set(b)):
        ka, kb = sorted(a.get(task, []), reverse=True), sorted(b.get(task, []), reverse=True)
        best_a = ka[0] if ka else (0.0, ())
        best_b = kb[0] if kb else (0.0, ())
        keeps_up = best_a[0] >= best_b[0] * (1 - tol) or (bool(ka) and best_a[1] == best_b[1])
        behind += not keeps_up
        line = {
            "task": task,
            "first": {"promoted": len(ka), "best": round(best_a[0], 4), "best_params": dict(best_a[1])},
            "second": {"promoted": len(kb), "best": round(best_b[0], 4), "best_params": dict(best_b[1])},
            "same_params_promoted": len({p for _, p in ka} & {p for _, p in kb}),
            "keeps_up": keeps_up}
        if not keeps_up and evals is not None:
            line["first_measured_second_best"] = evals.get((task, best_b[1]), [])
        print(json.dumps(line))
    print(json.dumps({"tasks": len(set(a) | set(b)), "behind": behind, "tolerance": tol}))
    sys.exit(1 if behind else 0)


if __name__ == "__main__":
    main()
