# The bundled KernelBench-format problems (configs/kernelbench) through kiln-eval: each program 0 (its
# default parameters) and its tuned setting (tuned.txt) timed against the problem's PyTorch reference; or
# (--paired) the tuned setting timed against program 0 as the reference with PyTorch as the torch_eager
# baseline, all three interleaved in one run (the comparison that holds up on a loaded machine); or
# (--sweep) every combination of its parameters checked for correctness only. Run by run.sh; JSON out.
import argparse
import itertools
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))


def read_msgpack(data):
    """A small MessagePack reader (a GPU host's Python may lack the msgpack module)."""

    def rd(i):
        t = data[i]
        if t <= 0x7F:
            return t, i + 1
        if t >= 0xE0:
            return t - 256, i + 1
        if 0x80 <= t <= 0x8F:
            return rmap(t & 15, i + 1)
        if 0x90 <= t <= 0x9F:
            return rarr(t & 15, i + 1)
        if 0xA0 <= t <= 0xBF:
            n = t & 31
            return data[i + 1 : i + 1 + n].decode(), i + 1 + n
        if t == 0xC0:
            return None, i + 1
        if t in (0xC2, 0xC3):
            return t == 0xC3, i + 1
        fmt = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
               0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
        if t in fmt:
            n = struct.calcsize(fmt[t])
            return struct.unpack(fmt[t], data[i + 1 : i + 1 + n])[0], i + 1 + n
        if t in (0xD9, 0xDA, 0xDB, 0xC4, 0xC5, 0xC6):
            w = {0xD9: 1, 0xC4: 1, 0xDA: 2, 0xC5: 2, 0xDB: 4, 0xC6: 4}[t]
            n = int.from_bytes(data[i + 1 : i + 1 + w], "big")
            s = data[i + 1 + w : i + 1 + w + n]
            return (s.decode() if t >= 0xD9 else s), i + 1 + w + n
        if t in (0xDC, 0xDD):
            w = 2 if t == 0xDC else 4
            return rarr(int.from_bytes(data[i + 1 : i + 1 + w], "big"), i + 1 + w)
        if t in (0xDE, 0xDF):
            w = 2 if t == 0xDE else 4
            return rmap(int.from_bytes(data[i + 1 : i + 1 + w], "big"), i + 1 + w)
        raise ValueError("unknown MessagePack type 0x%02x" % t)

    def rarr(n, i):
        out = []
        for _ in range(n):
            v, i = rd(i)
            out.append(v)
        return out, i

    def rmap(n, i):
        out = {}
        for _ in range(n):
            k, i = rd(i)
            v, i = rd(i)
            out[k] = v
        return out, i

    return rd(0)[0]


def task_params(task_dir):
    """The `params:` of a task.yaml, in order: [(NAME, [values...])]."""
    params, inside = [], False
    with open(os.path.join(task_dir, "task.yaml")) as f:
        for line in f:
            if re.match(r"^params:\s*$", line):
                inside = True
                continue
            if inside:
                m = re.match(r"^\s+([A-Za-z_][A-Za-z0-9_]*):\s*\[(.*)\]\s*$", line)
                if not m:
                    break
                params.append((m.group(1), [v.strip() for v in m.group(2).split(",")]))
    return params


def task_backend(task_dir):
    with open(os.path.join(task_dir, "task.yaml")) as f:
        m = re.search(r"^backend:\s*(\w+)", f.read(), re.M)
    return m.group(1) if m else "cpu"


def tuned_settings():
    """tuned.txt: `PROBLEM NAME=VALUE ...` per line, a parameter choice found faster than program 0."""
    out = {}
    with open(os.path.join(os.path.dirname(__file__), "tuned.txt")) as f:
        for line in f:
            line = line.split("#")[0].split()
            if line:
                out[line[0]] = dict(kv.split("=", 1) for kv in line[1:])
    return out


def build(task_dir, defines, work, cxx):
    source = os.path.join(task_dir, "kernel.cpp")
    tag = "_".join("%s%s" % kv for kv in sorted(defines.items())) or "default"
    so = os.path.join(work, "%s-%s.so" % (os.path.basename(task_dir), tag))
    cmd = [cxx, "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17",
           "-I" + os.path.join(ROOT, "libs", "core", "include")]
    cmd += ["-D%s=%s" % kv for kv in sorted(defines.items())] + ["-o", so, source]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError("%s: build failed: %s" % (" ".join(cmd), run.stderr[-500:]))
    return so


def evaluate(args, task_dir, so, timing, reference=None):
    out = so + (".timed" if timing else "") + ".msgpack"
    cmd = [args.eval, "--task", task_dir, "--kernel", so, "--out", out, "--python", args.python]
    cmd += ["--reference", reference] if reference else []
    cmd += args.eval_args.split() if timing else ["--no-timing"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if not os.path.exists(out):
        return {"status": "no_report", "message": run.stderr[-500:]}
    with open(out, "rb") as f:
        return read_msgpack(f.read())


def summary(report, defines):
    row = {"defines": defines, "status": report.get("status"), "message": report.get("message", "")}
    corr = report.get("correctness") or {}
    row["max_abs_error"] = corr.get("max_abs_error")
    cases = (report.get("performance") or {}).get("cases") or []
    if cases:
        c = cases[0]
        row.update({"case": c.get("dims"), "median_us": c["candidate"]["median_us"],
                    "reference_median_us": c["reference"]["median_us"], "speedup": c["speedup"],
                    "speedup_lo": c["speedup_lo"], "speedup_hi": c["speedup_hi"],
                    "samples": c["candidate"].get("n"), "stop_reason": c.get("stop_reason")})
    return row


def torch_threads(python):
    run = subprocess.run([python, "-c", "import torch; print(torch.__version__, torch.get_num_threads())"],
                         capture_output=True, text=True)
    parts = run.stdout.split()
    return (parts[0], int(parts[1])) if run.returncode == 0 and len(parts) == 2 else (None, None)


def problem_dirs(args):
    base = os.path.join(ROOT, "configs", "kernelbench")
    names = args.problems or sorted(os.listdir(base))
    dirs = [os.path.join(base, n) for n in names]
    return [d for d in dirs if os.path.isdir(d) and task_backend(d) == "cpu"]


def sweep(args, work):
    rows, failed = [], 0
    for task_dir in problem_dirs(args):
        params = task_params(task_dir)
        names = [p[0] for p in params]
        for values in itertools.product(*[p[1] for p in params]):
            defines = dict(zip(names, values))
            try:
                report = evaluate(args, task_dir, build(task_dir, defines, work, args.cxx), False)
            except RuntimeError as e:  # a combination that does not build fails the sweep, the rest still run
                report = {"status": "build_failed", "message": str(e)}
            row = summary(report, defines)
            row["problem"] = os.path.basename(task_dir)
            failed += row["status"] != "ok"
            print("%s %s: %s %s" % (row["problem"], " ".join("%s=%s" % kv for kv in defines.items()),
                                    row["status"], row["message"][:120]), file=sys.stderr)
            rows.append(row)
    return {"mode": "sweep", "combinations": len(rows), "failed": failed, "results": rows}, failed == 0


def timed(args, work):
    version, threads = torch_threads(args.python)
    tuned = tuned_settings()
    rows = []
    for task_dir in problem_dirs(args):
        name = os.path.basename(task_dir)
        row = {"problem": name}
        for label, defines in (("program0", {}), ("tuned", tuned.get(name))):
            if defines is None:
                continue
            report = evaluate(args, task_dir, build(task_dir, defines, work, args.cxx), True)
            row[label] = summary(report, defines)
            s = row[label]
            print("%s %s: %s %s" % (name, label, s["status"], s["message"][:160]), file=sys.stderr)
        rows.append(row)
    speedups = {label: [r[label]["speedup"] for r in rows if "speedup" in r.get(label, {})]
                for label in ("program0", "tuned")}
    geomean = {label: round(math.exp(sum(math.log(v) for v in s) / len(s)), 4) if s else None
               for label, s in speedups.items()}
    return {"mode": "timed", "torch": version, "torch_threads": threads, "host_cpus": os.cpu_count(),
            "eval_args": args.eval_args, "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "geomean_speedup_vs_torch": geomean, "results": rows}, True


def paired_package(task_dir, work):
    """A copy of the problem whose reference is program 0 (kernel.cpp as reference.cpp) and whose module is
    the torch_eager baseline: the tuned setting, program 0 and PyTorch timed interleaved in one run."""
    pkg = os.path.join(work, os.path.basename(task_dir) + "-paired")
    os.makedirs(pkg, exist_ok=True)
    for name in os.listdir(task_dir):
        with open(os.path.join(task_dir, name), "rb") as f:
            data = f.read()
        if name == "task.yaml":
            data += b"baselines: [torch_eager]\n"
        with open(os.path.join(pkg, name), "wb") as f:
            f.write(data)
    with open(os.path.join(task_dir, "kernel.cpp"), "rb") as f, open(os.path.join(pkg, "reference.cpp"), "wb") as g:
        g.write(f.read())
    return pkg


def paired(args, work):
    version, threads = torch_threads(args.python)
    tuned = tuned_settings()
    rows = []
    for task_dir in problem_dirs(args):
        name = os.path.basename(task_dir)
        pkg = paired_package(task_dir, work)
        program0 = build(task_dir, {}, work, args.cxx)
        report = evaluate(args, pkg, build(task_dir, tuned[name], work, args.cxx), True, program0)
        row = {"problem": name, "tuned": tuned[name], "status": report.get("status"), "message": report.get("message")}
        cases = (report.get("performance") or {}).get("cases") or []
        if cases:
            c = cases[0]
            eager = [b for b in c.get("baselines", []) if b["name"] == "torch_eager"]
            row.update({"case": c.get("dims"), "tuned_us": c["candidate"]["median_us"],
                        "program0_us": c["reference"]["median_us"], "tuned_vs_program0": c["speedup"],
                        "tuned_vs_program0_lo": c["speedup_lo"], "tuned_vs_program0_hi": c["speedup_hi"],
                        "samples": c["candidate"].get("n"), "stop_reason": c.get("stop_reason")})
            if eager:
                e = eager[0]["stats"]["median_us"]
                row.update({"torch_eager_us": e, "tuned_vs_eager": e / c["candidate"]["median_us"],
                            "program0_vs_eager": e / c["reference"]["median_us"]})
        print("%s: %s %s" % (name, row["status"], (row["message"] or "")[:160]), file=sys.stderr)
        rows.append(row)
    return {"mode": "paired", "torch": version, "torch_threads": threads, "host_cpus": os.cpu_count(),
            "eval_args": args.eval_args, "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "results": rows}, all(r["status"] == "ok" for r in rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--eval", required=True, help="the kiln-eval binary")
    ap.add_argument("--python", default="/usr/bin/python3", help="a Python with torch")
    ap.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    ap.add_argument("--sweep", action="store_true", help="every parameter combination, correctness only")
    ap.add_argument("--paired", action="store_true",
                    help="the tuned setting against program 0 and torch_eager, interleaved in one run")
    ap.add_argument("--eval-args", default="--min-time 0.5 --max-time 5")
    ap.add_argument("problems", nargs="*")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kiln-kernelbench-") as work:
        result, ok = (sweep if args.sweep else paired if args.paired else timed)(args, work)
    json.dump(result, sys.stdout, indent=1)
    print()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
