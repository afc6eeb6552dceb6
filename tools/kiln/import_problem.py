# `kiln task import`'s reader of a KernelBench-format problem: module-level size constants, class
# Model(nn.Module), get_inputs(), get_init_inputs(). It finds the task's tensors by running the module:
# shapes on the meta device (no memory, any size), once as given and once with each integer constant
# changed, so that a dim that follows a constant is named after it; values (for the inputs' init) and the
# checks that need them (randomness, in-place outputs, value-dependent shapes) on the CPU at small sizes.
#
# Run as `python3 -I -c <this file> --file PROBLEM.py --out RESULT.json --name NAME --backend B
# [--set NAME=VALUE ...]`. Exit 0: RESULT.json holds {"yaml": task.yaml's text, "notes": [...]}.
# Exit 2: what cannot be imported, one line "FILE:LINE: ..." on stdout. Exit 3: no torch here.
import argparse
import ast
import contextlib
import inspect
import json
import math
import sys
import traceback
import warnings

DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64", "int32": "int32",
          "int64": "int64", "int8": "int8", "uint8": "uint8"}
TOLERANCES = {"fp32": (1e-3, 1e-3), "fp64": (1e-7, 1e-7), "fp16": (1e-2, 1e-2), "bf16": (2e-2, 2e-2)}
VALUE_DEPENDENT_OPS = ("nonzero", "unique", "masked_select", "repeat_interleave", "bincount", "histc")
SAMPLE_BYTES = 1 << 30  # tensors made for real, to read their values: beyond this, at smaller sizes
SMALL = ((3, 1), (17, 6), (67, 10))  # correctness cases: the i-th size constant -> min(v, a + b*i)


class Refusal(Exception):
    pass


class Problem:
    def __init__(self, path, sets):
        self.path = path
        with open(path, encoding="utf-8") as f:
            self.source = f.read()
        try:
            self.tree = ast.parse(self.source, path)
        except SyntaxError as e:
            raise Refusal("%s:%d: not Python: %s" % (path, e.lineno or 0, e.msg))
        self.ns = {"__name__": "kiln_reference", "__file__": path}
        try:
            exec(compile(self.source, path, "exec"), self.ns)
        except Exception as e:
            self.refuse(self.line_of(e), "the file does not run: %s: %s" % (type(e).__name__, e))
        self.defs = {n.name: n for n in self.tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
        model = self.ns.get("Model")
        if not isinstance(model, type) or not issubclass(model, torch.nn.Module):
            self.refuse(self.defs["Model"].lineno if "Model" in self.defs else 0,
                        "no class Model(nn.Module): a KernelBench problem defines one")
        for fn in ("get_inputs", "get_init_inputs"):
            if not callable(self.ns.get(fn)):
                self.refuse(0, "no %s(): a KernelBench problem defines one" % fn)
        self.consts = self.find_constants()
        for name, value in sets.items():
            if name not in self.consts:
                raise Refusal("--set %s: %s has no module-level integer constant %s" % (name, path, name))
            self.consts[name] = value
        self.sets = set(sets)
        self.forward_code = getattr(model.forward, "__code__", None)

    def refuse(self, line, text):
        raise Refusal("%s:%d: %s" % (self.path, line, text) if line else "%s: %s" % (self.path, text))

    def find_constants(self):
        """The module-level names bound to an integer by a plain assignment, in file order."""
        consts = {}
        for node in self.tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name) and type(self.ns.get(t.id)) is int:
                        consts[t.id] = self.ns[t.id]
        return consts

    def line_of(self, exc):
        """The innermost line of the problem file in an exception's traceback (0: none)."""
        line = 0
        for frame in traceback.extract_tb(exc.__traceback__):
            if frame.filename == self.path:
                line = frame.lineno
        return line

    def def_line(self, name, method=None):
        node = self.defs.get(name)
        if node is not None and method:
            node = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == method), node)
        return node.lineno if node is not None else 0

    def return_line(self, name, method=None):
        node = self.defs.get(name)
        if node is not None and method:
            node = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == method), None)
        returns = [n.lineno for n in ast.walk(node) if isinstance(n, ast.Return)] if node is not None else []
        return max(returns) if returns else self.def_line(name, method)

    def attribute_line(self, key):
        """The line in Model.__init__ that makes the submodule or parameter a state_dict key starts with."""
        first = key.split(".")[0]
        init = self.defs.get("Model")
        for n in ast.walk(init) if init is not None else []:
            if isinstance(n, ast.Attribute) and n.attr == first and isinstance(n.ctx, ast.Store):
                return n.lineno
        return self.def_line("Model", "__init__")

    # ------------------------------------------------------------------ running the module

    def build(self, consts, device):
        """get_init_inputs(), the module and get_inputs() with the constants set, as the evaluator makes them."""
        self.ns.update(consts)
        with Device(device):
            torch.manual_seed(0)
            init = list(self.ns["get_init_inputs"]())
            model = self.ns["Model"](*init)
            inputs = self.ns["get_inputs"]()
        if not isinstance(inputs, (list, tuple)):
            self.refuse(self.return_line("get_inputs"), "get_inputs() returns %s, not a list" % type(inputs).__name__)
        for i, t in enumerate(inputs):
            if not isinstance(t, torch.Tensor):
                self.refuse(self.return_line("get_inputs"), "get_inputs()[%d] is %s: Kiln's inputs are tensors" % (
                    i, type(t).__name__))
        return init, model, list(inputs)

    def forward(self, model, inputs, device, watch=None):
        """forward() on the inputs, traced: the line it returned from, and the first line after which watch() held."""
        tracer = Tracer(self.path, self.forward_code, watch)
        sys.settrace(tracer.enter)
        try:
            with torch.no_grad(), Device(device):
                out = model(*inputs)
        finally:
            sys.settrace(None)
        tracer.check()
        return out, tracer

    def state(self, model):
        """The module's parameters and buffers in state_dict order, as the evaluator replaces them."""
        live = dict(model.named_parameters())
        live.update(dict(model.named_buffers()))
        out = []
        for key, value in model.state_dict(keep_vars=True).items():
            if key not in live:
                self.refuse(self.attribute_line(key), "state_dict key %s is shared with another parameter" % key)
            out.append((key, live[key]))
        return out

    def check_output(self, out, tracer):
        line = tracer.return_line or self.return_line("Model", "forward")
        if isinstance(out, (tuple, list)):
            self.refuse(line, "forward() returns a %s: a Kiln task has one output tensor" % type(out).__name__)
        if not isinstance(out, torch.Tensor):
            self.refuse(line, "forward() returns %s, not a tensor" % type(out).__name__)

    def shapes(self, consts, device):
        """Every tensor of the task for these constants: (kind, name, shape, dtype), and get_init_inputs()."""
        init, model, inputs = self.build(consts, device)
        out, tracer = self.forward(model, inputs, device)
        self.check_output(out, tracer)
        tensors = [("input", i, tuple(t.shape), t.dtype) for i, t in enumerate(inputs)]
        tensors += [("param", k, tuple(v.shape), v.dtype) for k, v in self.state(model)]
        tensors.append(("output", "out", tuple(out.shape), out.dtype))
        self.out_line = tracer.return_line or self.return_line("Model", "forward")
        return tensors, init

    def base_shapes(self):
        """The tensors at the problem's own sizes: on the meta device, or on the CPU when an op has no meta
        kernel (at the problem's sizes: --set makes them smaller); an op whose output's size depends on the
        values is refused."""
        try:
            return self.shapes(self.consts, "meta"), "meta"
        except Refusal:
            raise
        except Exception as e:
            text = str(e)
            op = next((o for o in VALUE_DEPENDENT_OPS if o in text), None)
            if op and "Meta" in text:
                self.refuse(self.line_of(e), "the output's shape depends on the input values (%s)" % op)
            first_error = e
        try:
            return self.shapes(self.consts, "cpu"), "cpu"
        except Refusal:
            raise
        except Exception as e:
            self.refuse(self.line_of(e) or self.line_of(first_error),
                        "the module does not run: %s: %s" % (type(e).__name__, str(e).splitlines()[0][:200]))

    def perturbed(self, name, device):
        """The tensors with one constant changed (doubled, else plus one); None when the module will not run so."""
        value = self.consts[name]
        for changed in (2 * value, value + 1):
            consts = dict(self.consts)
            consts[name] = changed
            try:
                return changed, self.shapes(consts, device)
            except Exception:
                continue
        return None, None


def Device(device):
    """Tensor factories without a device make their tensors on `device` (meta: shapes only, at any size)."""
    return FactoryDevice(device) if device == "meta" else contextlib.nullcontext()


class Tracer:
    """Line events of the problem file's frames: the line forward() returned from, and where watch() first held."""

    def __init__(self, path, forward_code, watch):
        self.path, self.forward_code, self.watch = path, forward_code, watch
        self.return_line = None
        self.blame = None
        self.last = None

    def enter(self, frame, event, arg):
        if frame.f_code.co_filename != self.path:
            return None
        return self.local

    def local(self, frame, event, arg):
        self.check()
        self.last = frame.f_lineno
        if event == "return" and frame.f_code is self.forward_code:
            self.return_line = frame.f_lineno
        return self.local

    def check(self):
        if self.watch is not None and self.blame is None and self.last is not None and self.watch():
            self.blame = self.last


def init_of(t, is_param):
    """Kiln's init for a tensor, from its values."""
    if t.dtype in (torch.int8, torch.uint8, torch.int32, torch.int64):
        lo, hi = (int(t.min()), int(t.max())) if t.numel() else (0, 0)
        return {(0, 0): "zeros", (1, 1): "ones"}.get((lo, hi), "int(%d, %d)" % (lo, hi))
    v = t.detach().double()
    if v.numel() == 0 or bool((v == 0).all()):
        return "zeros"
    if bool((v == 1).all()):
        return "ones"
    lo, hi = float(v.min()), float(v.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "normal"
    if is_param and lo < 0 < hi:
        b = max(-lo, hi)
        return "uniform(-%.6g, %.6g)" % (b * 1.000001, b * 1.000001)
    if not is_param and v.numel() >= 64 and lo < 0 and abs(float(v.mean())) < 0.1 and abs(float(v.std()) - 1) < 0.1:
        return "normal"
    if not is_param and lo >= 0 and hi <= 1:
        return "uniform(0, 1)"
    if hi - lo < 1e-6 * max(1.0, abs(lo)):
        hi = lo + 1e-6 * max(1.0, abs(lo))
    return "uniform(%.6g, %.6g)" % (lo - abs(lo) * 1e-6, hi + abs(hi) * 1e-6)


def snap_int_range(init, consts):
    """int(lo, hi) drawn by randint(0, C): a sample may miss the ends, which are 0 and a constant C less one."""
    if not init.startswith("int("):
        return init
    lo, hi = (int(a) for a in init[4:-1].split(","))
    slack = max(1, (hi - lo) // 10)
    lo = 0 if 0 < lo <= slack else lo
    above = [c for c in consts.values() if hi < c <= hi + 1 + slack]
    return "int(%d, %d)" % (lo, min(above) - 1 if above else hi)


def draw(init, shape, dtype):
    """A tensor drawn as Kiln draws one for `init` (any values of that law)."""
    name, _, rest = init.partition("(")
    args = [float(a) for a in rest.rstrip(")").split(",")] if rest else []
    if name == "zeros":
        return torch.zeros(shape, dtype=dtype)
    if name == "ones":
        return torch.ones(shape, dtype=dtype)
    if name == "int":
        return torch.randint(int(args[0]), int(args[1]) + 1, shape, dtype=dtype)
    if name == "uniform":
        return (torch.rand(shape, dtype=torch.float64) * (args[1] - args[0]) + args[0]).to(dtype)
    return torch.randn(shape, dtype=torch.float64).to(dtype)


def same_values(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(((a == b) | ((a != a) & (b != b))).all())


def make_factory_device():
    factories = {getattr(torch, n) for n in (
        "empty", "zeros", "ones", "full", "rand", "randn", "randint", "randperm", "arange", "linspace", "logspace",
        "eye", "tensor", "empty_strided", "scalar_tensor") if hasattr(torch, n)}

    class FactoryDevice(torch.overrides.TorchFunctionMode):
        def __init__(self, device):
            super().__init__()
            self.device = device

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func in factories and kwargs.get("device") is None:
                kwargs["device"] = self.device
            return func(*args, **kwargs)

    return FactoryDevice


class Importer:
    """The task of a problem: its tensors named and shaped, their init, and its cases."""

    def __init__(self, problem):
        self.p = problem
        self.notes = []

    def run(self, name, backend):
        p = self.p
        (self.base, base_init), self.device = p.base_shapes()
        self.out_line = p.out_line
        if self.device == "cpu":
            self.notes.append("an op has no meta kernel here: shapes were found by running the module on the CPU")
        self.find_dims(base_init)
        self.specs = self.name_tensors()
        self.choose_inits()
        self.make_cases()
        self.check_behaviour(self.check_consts)
        return self.yaml(name, backend)

    # ----------------------------------------------------------- shapes

    def find_dims(self, base_init):
        p = self.p
        deps, self.init_used = {}, set()
        layout = [(t[0], t[1], len(t[2])) for t in self.base]
        for k, v in p.consts.items():
            if v <= 0:
                continue
            changed, res = p.perturbed(k, self.device)
            if res is None:
                continue
            tensors, init = res
            if repr(init) != repr(base_init):
                self.init_used.add(k)
            if [(t[0], t[1], len(t[2])) for t in tensors] == layout:
                deps[k] = (changed, tensors)
        self.shape_names = []
        for ti, (kind, key, shape, dtype) in enumerate(self.base):
            dims = []
            for d, size in enumerate(shape):
                if size <= 0:
                    p.refuse(self.line_for(kind, key), "%s has a dim of size %d" % (self.label(kind, key), size))
                follows = [k for k, (c, ts) in deps.items() if ts[ti][2][d] != size]
                if not follows:
                    dims.append(str(size))
                    continue
                k = follows[0]
                changed, ts = deps[k]
                if len(follows) == 1 and size == p.consts[k] and ts[ti][2][d] == changed:
                    dims.append(k)
                    continue
                p.refuse(self.line_for(kind, key), "%s: dim %d (%d) follows %s but is not one of the module's "
                         "constants; Kiln's shapes name a constant or a fixed size" % (
                             self.label(kind, key), d, size, " and ".join(follows)))
            self.shape_names.append(dims)
        named = {d for dims in self.shape_names for d in dims if not d.isdigit()}
        self.size_like = [k for k in p.consts if k in named]
        keys = named | self.init_used | p.sets
        self.case_keys = [k for k in p.consts if k in keys]

    def line_for(self, kind, key):
        if kind == "input":
            return self.p.return_line("get_inputs")
        if kind == "param":
            return self.p.attribute_line(key)
        return self.out_line

    def label(self, kind, key):
        if kind == "input":
            names = list(inspect.signature(self.p.ns["Model"].forward).parameters)[1:]
            return "input %d of get_inputs()%s" % (key, " (%s)" % names[key] if key < len(names) else "")
        return "parameter %s" % key if kind == "param" else "forward()'s result"

    def name_tensors(self):
        p = self.p
        params = list(inspect.signature(p.ns["Model"].forward).parameters.values())[1:]
        used = {"out"}
        specs = []
        for (kind, key, shape, dtype), dims in zip(self.base, self.shape_names):
            if kind == "input":
                par = params[key] if key < len(params) else (params[-1] if params else None)
                if par is not None and par.kind == par.VAR_POSITIONAL:
                    name = "%s%d" % (par.name, key)
                else:
                    name = par.name if par is not None and key < len(params) else "input%d" % key
            elif kind == "param":
                name = key.replace(".", "_")
                name = name if name[0].isalpha() or name[0] == "_" else "p_" + name
            else:
                name = "out"
            while kind != "output" and name in used:
                name += "_"
            used.add(name)
            kiln_dtype = DTYPES.get(str(dtype).replace("torch.", ""))
            if kiln_dtype is None:
                p.refuse(self.line_for(kind, key), "%s is %s: Kiln's dtypes are %s" % (
                    self.label(kind, key), dtype, ", ".join(DTYPES.values())))
            specs.append({"kind": kind, "key": key, "name": name, "dtype": kiln_dtype, "torch_dtype": dtype,
                          "shape": dims})
        return specs

    def resolve(self, dims, consts):
        return tuple(int(d) if d.isdigit() else consts[d] for d in dims)

    # ----------------------------------------------------------- values

    def choose_inits(self):
        """Each input's init from the values get_inputs() and the module make (at the problem's sizes when they
        fit in memory, else at smaller ones)."""
        p = self.p
        total = sum(math.prod(t[2]) * torch.empty((), dtype=t[3]).element_size() for t in self.base if t[0] != "output")
        consts = dict(p.consts)
        if total > SAMPLE_BYTES:
            consts.update({k: min(p.consts[k], 256) for k in self.size_like})
            self.notes.append("values were sampled with the size constants at most 256")
        try:
            _, model, inputs = p.build(consts, "cpu")
        except Refusal:
            raise
        except Exception as e:
            p.refuse(p.line_of(e), "the module does not build on the CPU: %s: %s" % (type(e).__name__, e))
        state = dict(p.state(model))
        for s in self.specs:
            if s["kind"] == "input":
                s["init"] = snap_int_range(init_of(inputs[s["key"]], False), p.consts)
            elif s["kind"] == "param":
                s["init"] = init_of(state[s["key"]], True)

    def drawn(self, consts):
        """The module and its inputs as the evaluator makes them for these constants: parameters and inputs
        drawn from their init."""
        _, model, _ = self.p.build(consts, "cpu")
        state = dict(self.p.state(model))
        inputs = []
        for s in self.specs:
            if s["kind"] == "output":
                continue
            t = draw(s["init"], self.resolve(s["shape"], consts), s["torch_dtype"])
            if s["kind"] == "param":
                if tuple(state[s["key"]].shape) != tuple(t.shape):
                    raise RuntimeError("%s is %s here" % (s["key"], tuple(state[s["key"]].shape)))
                state[s["key"]].data = t
            else:
                inputs.append(t)
        return model, inputs

    def fits(self, case):
        consts = dict(self.p.consts)
        consts.update(case)
        try:
            model, inputs = self.drawn(consts)
            out, _ = self.p.forward(model, inputs, "cpu")
        except Exception:
            return False
        want = self.resolve(self.specs[-1]["shape"], consts)
        return isinstance(out, torch.Tensor) and tuple(out.shape) == want and out.dtype == self.specs[-1]["torch_dtype"]

    def make_cases(self):
        """The benchmark case: the problem's sizes. Correctness cases: the size constants made small, each
        checked by running the module on drawn inputs; one that fails is tried with one constant restored to
        its own size, then dropped."""
        p = self.p
        self.benchmark = {k: p.consts[k] for k in self.case_keys}
        self.cases = []
        for a, b in SMALL:
            case = dict(self.benchmark)
            case.update({k: min(p.consts[k], a + b * i) for i, k in enumerate(self.size_like)})
            fitted = case if self.fits(case) else None
            for k in self.size_like if fitted is None else []:
                retry = dict(case)
                retry[k] = p.consts[k]
                if retry != case and self.fits(retry):
                    fitted = retry
                    break
            if fitted is None:
                self.notes.append("dropped a correctness case the module does not run at: %s" % dims_text(case))
            elif fitted not in self.cases and fitted != self.benchmark:
                self.cases.append(fitted)
        self.check_consts = dict(p.consts)
        if self.cases:
            self.check_consts.update(self.cases[0])
        else:
            if self.size_like:
                self.notes.append("no smaller case runs: the problem's own sizes are the correctness case")
            self.cases.append(self.benchmark)
            self.check_consts.update({k: min(p.consts[k], 256) for k in self.size_like} if self.size_like else {})

    def check_behaviour(self, consts):
        """What the evaluator cannot compare: an output that is an input, inputs changed in place, randomness,
        an output whose shape follows the input values."""
        p = self.p
        try:
            model, inputs = self.drawn(consts)
        except Exception:
            consts = dict(p.consts)
            model, inputs = self.drawn(consts)
        names = [s["name"] for s in self.specs if s["kind"] == "input"]
        copies = [t.clone() for t in inputs]
        changed = lambda: any(not same_values(a, b) for a, b in zip(inputs, copies))
        out, tracer = p.forward(model, inputs, "cpu", watch=changed)
        p.check_output(out, tracer)
        line = tracer.return_line or self.out_line
        for name, t in zip(names, inputs):
            if out is t or (out.numel() and out.data_ptr() == t.data_ptr() and out.shape == t.shape):
                p.refuse(line, "forward() returns its input %s (an in-place output): Kiln's output is a tensor "
                         "of its own" % name)
        for name, a, b in zip(names, inputs, copies):
            if not same_values(a, b):
                p.refuse(tracer.blame or line, "forward() modifies its input %s in place" % name)
        first = out.clone()
        rng = torch.get_rng_state()
        consumed = lambda: not torch.equal(torch.get_rng_state(), rng)
        again, tracer = p.forward(model, [c.clone() for c in copies], "cpu", watch=consumed)
        if not same_values(first, again):
            dropout = any(isinstance(m, torch.nn.modules.dropout._DropoutNd) for m in model.modules())
            p.refuse(tracer.blame or p.def_line("Model", "forward"), "forward() is random: two runs on the same "
                     "inputs differ%s" % (" (dropout in training mode)" if dropout else ""))
        _, other = self.drawn(consts)
        third, _ = p.forward(model, other, "cpu")
        if tuple(third.shape) != tuple(first.shape):
            p.refuse(line, "the output's shape depends on the input values (%s, then %s)" % (
                tuple(first.shape), tuple(third.shape)))

    # ----------------------------------------------------------- task.yaml

    def yaml(self, name, backend):
        main = next((s for s in self.specs if s["kind"] == "input"), self.specs[0])
        rtol, atol = TOLERANCES.get(self.specs[-1]["dtype"], (0, 0))
        lines = ["name: %s" % name, "backend: %s" % backend, "dtype: %s" % main["dtype"], "inputs:"]
        for s in self.specs:
            fields = "name: %s, dtype: %s, shape: [%s]" % (s["name"], s["dtype"], ", ".join(s["shape"]))
            if s["kind"] == "output":
                lines += ["outputs:", "  - {%s}" % fields]
                continue
            fields += ", init: \"%s\"" % s["init"]
            if s["kind"] == "param":
                fields += ", param: %s" % s["key"]
            lines.append("  - {%s}" % fields)
        if not any(s["kind"] != "output" for s in self.specs):
            lines[lines.index("inputs:")] = "inputs: []"
        lines += ["correctness:", "  cases: [%s]" % ", ".join(case_yaml(c) for c in self.cases), "  seeds: 3",
                  "  rtol: %g" % rtol, "  atol: %g" % atol,
                  "benchmark:", "  cases: [%s]" % case_yaml(self.benchmark)]
        return "\n".join(lines) + "\n"


def case_yaml(case):
    return "{%s}" % ", ".join("%s: %d" % kv for kv in case.items())


def dims_text(case):
    return ", ".join("%s=%d" % kv for kv in case.items())


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="import_problem")
    for flag in ("--file", "--out", "--name", "--backend"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--set", action="append", default=[])
    args = parser.parse_args(argv)
    args.set = {k: int(v) for k, _, v in (s.partition("=") for s in args.set)}
    return args


def main(argv):
    global torch, FactoryDevice
    args = parse_args(argv)
    warnings.simplefilter("ignore")
    try:
        import torch
    except Exception as e:
        print("no torch: %s: %s" % (type(e).__name__, e))
        return 3
    FactoryDevice = make_factory_device()
    torch.set_num_threads(max(1, min(4, torch.get_num_threads())))
    try:
        importer = Importer(Problem(args.file, args.set))
        text = importer.run(args.name, args.backend)
    except Refusal as e:
        print(str(e).splitlines()[0])
        return 2
    except Exception as e:  # the module failed somewhere no check expected: its own error, on one line
        line = max([f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == args.file] or [0])
        where = "%s:%d" % (args.file, line) if line else args.file
        print("%s: cannot import: %s: %s" % (where, type(e).__name__, (str(e).splitlines() or [""])[0][:300]))
        return 2
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"yaml": text, "notes": importer.notes}, f)
    return 0


sys.exit(main(sys.argv[1:]))
