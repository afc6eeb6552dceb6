# On a GPU host with nvcc and torch: the CUDA variants of the bundled KernelBench problems
# (configs/kernelbench/*_cuda) called directly through the kernel ABI (ctypes), outside Kiln's evaluator:
# every parameter combination checked against the problem's reference.py on every correctness case and
# seed (outputs poisoned with NaN first), then program 0 (its defaults) on the benchmark case, checked and
# timed against the module (CUDA events, median of REPS calls after a warm-up; L2 not flushed). A quick
# check that the kernels are right, not Kiln's measurement protocol. JSON on stdout.
#   python3 bench/kernelbench/cuda_check.py [--arch sm_90] [--reps 20] [PROBLEM_cuda ...] > results/h200.json
import argparse
import ctypes
import itertools
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import torch
import yaml

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
DTYPES = {"fp32": (torch.float32, 0), "int64": (torch.int64, 5), "int32": (torch.int32, 4)}


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * 8)]


class Args(ctypes.Structure):
    _fields_ = [("inputs", ctypes.POINTER(Tensor)), ("n_inputs", ctypes.c_int32),
                ("outputs", ctypes.POINTER(Tensor)), ("n_outputs", ctypes.c_int32),
                ("scalar_names", ctypes.POINTER(ctypes.c_char_p)), ("scalar_values", ctypes.POINTER(ctypes.c_double)),
                ("n_scalars", ctypes.c_int32), ("stream", ctypes.c_void_p)]


def build(task_dir, defines, work, arch):
    tag = "_".join("%s%s" % kv for kv in sorted(defines.items())) or "default"
    so = os.path.join(work, "%s-%s.so" % (os.path.basename(task_dir), tag))
    cmd = ["nvcc", "-O3", "-shared", "-Xcompiler", "-fPIC", "-arch=" + arch, "-cudart", "shared",
           "-I" + os.path.join(ROOT, "libs", "core", "include")]
    cmd += ["-D%s=%s" % kv for kv in sorted(defines.items())] + ["-o", so, os.path.join(task_dir, "kernel.cu")]
    run = subprocess.run(cmd, capture_output=True, text=True)
    return so if run.returncode == 0 else RuntimeError(run.stderr[-400:])


def shape_of(t, dims):
    return [int(d) if str(d).isdigit() else int(dims[d]) for d in t["shape"]]


def make_input(t, dims, gen):
    dt = DTYPES[t["dtype"]][0]
    shape = shape_of(t, dims)
    init = str(t.get("init", "normal")).replace(" ", "")
    if init == "normal":
        return torch.randn(shape, generator=gen, device="cuda", dtype=dt)
    if init in ("zeros", "ones"):
        return (torch.zeros if init == "zeros" else torch.ones)(shape, device="cuda", dtype=dt)
    a, b = (float(v) for v in init[init.index("(") + 1 : -1].split(","))
    if init.startswith("int("):
        return torch.randint(int(a), int(b) + 1, shape, generator=gen, device="cuda", dtype=dt)
    return torch.empty(shape, device="cuda", dtype=dt).uniform_(a, b, generator=gen)


class Problem:
    def __init__(self, task_dir):
        self.dir = task_dir
        with open(os.path.join(task_dir, "task.yaml")) as f:
            self.spec = yaml.safe_load(f)
        with open(os.path.join(task_dir, "reference.py")) as f:
            source = f.read()
        self.ns = {"__name__": "kiln_reference"}
        exec(compile(source, "reference.py", "exec"), self.ns)
        scalars = self.spec.get("scalars") or {}
        self.names = (ctypes.c_char_p * max(1, len(scalars)))(*[k.encode() for k in scalars])
        self.values = (ctypes.c_double * max(1, len(scalars)))(*[float(v) for v in scalars.values()])
        self.n_scalars = len(scalars)

    def case(self, dims, seed):
        gen = torch.Generator(device="cuda")
        gen.manual_seed(seed)
        ins = [make_input(t, dims, gen) for t in self.spec["inputs"]]
        self.ns.update(dims)
        torch.manual_seed(0)
        model = self.ns["Model"](*self.ns["get_init_inputs"]()).cuda()
        state = dict(model.named_parameters())
        state.update(dict(model.named_buffers()))
        args = []
        for t, v in zip(self.spec["inputs"], ins):
            if t.get("param"):
                state[t["param"]].data = v
            else:
                args.append(v)
        return ins, model, args

    def call(self, fn, ins, outs):
        ti = (Tensor * len(ins))()
        to = (Tensor * len(outs))()
        for arr, ts in ((ti, ins), (to, outs)):
            for k, v in enumerate(ts):
                arr[k].data = v.data_ptr()
                arr[k].dtype = DTYPES[{torch.float32: "fp32", torch.int64: "int64", torch.int32: "int32"}[v.dtype]][1]
                arr[k].ndim = v.dim()
                for d, s in enumerate(v.shape):
                    arr[k].shape[d] = s
        a = Args(ti, len(ins), to, len(outs), self.names, self.values, self.n_scalars,
                 ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        return fn(ctypes.byref(a))

    def check(self, fn, dims, seed):
        ins, model, args = self.case(dims, seed)
        with torch.no_grad():
            ref = model(*args)
        refs = list(ref) if isinstance(ref, (tuple, list)) else [ref]
        outs = [torch.full(shape_of(t, dims), float("nan"), device="cuda") for t in self.spec["outputs"]]
        rc = self.call(fn, ins, outs)
        torch.cuda.synchronize()
        if rc != 0:
            return False, "kiln_entry returned %d" % rc, 0.0
        rtol, atol = float(self.spec["correctness"]["rtol"]), float(self.spec["correctness"]["atol"])
        worst = 0.0
        for got, want in zip(outs, refs):
            err = (got - want.float()).abs()
            bad = ~(err <= atol + rtol * want.abs())
            worst = max(worst, float(err.max()) if err.numel() else 0.0)
            if bool(bad.any()):
                return False, "%d mismatches, max abs error %g" % (int(bad.sum()), worst), worst
        return True, "", worst

    def time(self, fn, dims, reps):
        ins, model, args = self.case(dims, 1)
        outs = [torch.empty(shape_of(t, dims), device="cuda") for t in self.spec["outputs"]]

        def median_us(run):
            for _ in range(3):
                run()
            samples = []
            for _ in range(reps):
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                run()
                stop.record()
                stop.synchronize()
                samples.append(start.elapsed_time(stop) * 1e3)
            return sorted(samples)[len(samples) // 2]

        with torch.no_grad():
            kernel_us = median_us(lambda: self.call(fn, ins, outs))
            torch_us = median_us(lambda: model(*args))
        return kernel_us, torch_us


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("problems", nargs="*")
    a = ap.parse_args()
    base = os.path.join(ROOT, "configs", "kernelbench")
    names = a.problems or sorted(n for n in os.listdir(base) if n.endswith("_cuda"))
    results = []
    with tempfile.TemporaryDirectory() as work:
        jobs = []
        for n in names:
            spec = yaml.safe_load(open(os.path.join(base, n, "task.yaml")))
            params = spec.get("params") or {}
            combos = [{}] + [dict(zip(params, vs)) for vs in itertools.product(*params.values())]
            jobs += [(n, c) for c in combos]
        with ThreadPoolExecutor(os.cpu_count() or 4) as pool:
            built = list(pool.map(lambda j: build(os.path.join(base, j[0]), j[1], work, a.arch), jobs))
        for n in names:
            p = Problem(os.path.join(base, n))
            row = {"problem": n, "combinations": []}
            for (jn, defines), so in zip(jobs, built):
                if jn != n:
                    continue
                entry = {"defines": defines}
                if isinstance(so, Exception):
                    entry.update(ok=False, why="build failed: " + str(so))
                else:
                    fn = ctypes.CDLL(so).kiln_entry
                    ok, why, worst = True, "", 0.0
                    for dims in p.spec["correctness"]["cases"]:
                        for seed in range(int(p.spec["correctness"].get("seeds", 1))):
                            ok1, why1, w = p.check(fn, dims, seed)
                            worst = max(worst, w)
                            if not ok1 and ok:
                                ok, why = False, "%s seed %d: %s" % (dims, seed, why1)
                    entry.update(ok=ok, why=why, max_abs_error=worst)
                    if not defines:  # program 0: the benchmark case, checked and timed
                        dims = p.spec["benchmark"]["cases"][0]
                        okb, whyb, wb = p.check(fn, dims, 0)
                        k_us, t_us = p.time(fn, dims, a.reps)
                        row["benchmark"] = {"case": dims, "ok": okb, "why": whyb, "max_abs_error": wb,
                                            "program0_us": round(k_us, 1), "torch_eager_us": round(t_us, 1),
                                            "speedup_vs_eager": round(t_us / k_us, 4)}
                row["combinations"].append(entry)
                print("%s %s: %s %s" % (n, defines or "(defaults)", "ok" if entry["ok"] else "FAIL", entry.get("why", "")),
                      file=sys.stderr)
            if "benchmark" in row:
                print("%s benchmark: %s" % (n, row["benchmark"]), file=sys.stderr)
            results.append(row)
    failed = sum(not c["ok"] for r in results for c in r["combinations"])
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "failed": failed, "results": results},
              sys.stdout, indent=1)
    print()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
