# The runner of a PyTorch contestant (a task's reference.py in KernelBench's format: class Model,
# get_inputs(), get_init_inputs()). The evaluator starts it as `python3 -I -c <this file>` in place of a
# runner process that loads a shared object (kiln/eval/runner.h), and it answers the same doorbells on the
# same arena: fd 3 is the arena (shared memory), fd 4 the configuration (JSON: the arena's layout, the
# module's source, the task's tensors and cases). Between calls the process is stopped, as every runner is.
#
# A call: the tensors are already in the arena (CPU) or in the device arenas the evaluator shares (CUDA);
# they are wrapped as torch tensors where they lie, the module for the call's case runs on them, and its
# result is copied into the output. `reported_us` is the time of forward() alone (perf_counter on the CPU,
# CUDA events around it and a synchronize on a GPU): what a user calling the module pays, without the
# wrapping and the copy that only Kiln needs.
import ctypes
import json
import mmap
import os
import signal
import struct
import sys
import time

PR_SET_DUMPABLE = 4
FUTEX_WAKE = 1
STATE_READY, STATE_SETUP_FAILED = 1, 3


class Arena:
    def __init__(self, cfg):
        self.layout = cfg["layout"]
        self.buf = mmap.mmap(3, cfg["arena_bytes"])
        os.close(3)
        self.futex_nr = cfg["futex_nr"]
        self.libc = ctypes.CDLL(None, use_errno=True)

    def u32(self, name):
        return struct.unpack_from("<I", self.buf, self.layout[name])[0]

    def i32(self, name):
        return struct.unpack_from("<i", self.buf, self.layout[name])[0]

    def put_u32(self, name, value):
        struct.pack_into("<I", self.buf, self.layout[name], value)

    def put_i32(self, name, value):
        struct.pack_into("<i", self.buf, self.layout[name], value)

    def put_f64(self, name, value):
        struct.pack_into("<d", self.buf, self.layout[name], value)

    def put_error(self, text):
        raw = text.encode("utf-8", "replace")[: self.layout["error_bytes"] - 1] + b"\0"
        self.buf[self.layout["error"] : self.layout["error"] + len(raw)] = raw

    def wake(self, name):
        cell = ctypes.c_uint32.from_buffer(self.buf, self.layout[name])
        self.libc.syscall(self.futex_nr, ctypes.addressof(cell), FUTEX_WAKE, 0x7FFFFFFF, None, None, 0)
        del cell

    def descriptor(self, kind, index):
        lay = self.layout
        at = lay[kind] + index * lay["tensor_size"]
        data = struct.unpack_from("<Q", self.buf, at + lay["t_data"])[0]
        dtype = struct.unpack_from("<i", self.buf, at + lay["t_dtype"])[0]
        ndim = struct.unpack_from("<i", self.buf, at + lay["t_ndim"])[0]
        if not 0 <= ndim <= lay["max_dims"]:
            raise RuntimeError("a tensor of %d dims" % ndim)
        shape = struct.unpack_from("<%dq" % ndim, self.buf, at + lay["t_shape"])
        return data, dtype, tuple(shape)


class Contestant:
    """The module of reference.py, one instance per case, run on tensors wrapped where they lie."""

    def __init__(self, cfg, arena):
        import torch

        self.torch = torch
        self.arena = arena
        self.cuda = cfg["device"] == "cuda"
        self.base = cfg["arena_base"]
        self.arena_bytes = cfg["arena_bytes"]
        self.dtypes = {0: torch.float32, 1: torch.float16, 2: torch.bfloat16, 3: torch.float64,
                       4: torch.int32, 5: torch.int64, 6: torch.int8, 7: torch.uint8}
        self.inputs = cfg["inputs"]
        self.outputs = cfg["outputs"]
        self.compile = cfg.get("compile", False)
        self.namespace = {"__name__": "kiln_reference", "__file__": cfg["file"]}
        exec(compile(cfg["source"], cfg["file"], "exec"), self.namespace)
        for name in ("Model", "get_init_inputs"):
            if name not in self.namespace:
                raise RuntimeError("%s defines no %s" % (cfg["file"], name))
        self.cases = {}
        for dims in cfg["cases"]:
            key = tuple(tuple(self.resolve(t["shape"], dims)) for t in self.inputs + self.outputs)
            self.cases.setdefault(key, dims)
        self.models = {}
        self.views = {}
        self.bases = []
        if self.cuda:
            self.attach(cfg)

    @staticmethod
    def resolve(shape, dims):
        return [int(d) if d.isdigit() else int(dims[d]) for d in shape]

    def attach(self, cfg):
        torch = self.torch
        torch.cuda.init()
        torch.zeros(1, device="cuda")  # the primary context, current on this thread
        lay = self.arena.layout
        while self.arena.u32("blob_state") != 1:
            time.sleep(0.0005)
        blob_bytes = self.arena.u32("blob_bytes")
        blob = bytes(self.arena.buf[lay["blob"] : lay["blob"] + blob_bytes])
        cuda = ctypes.CDLL("libcuda.so.1")

        class Handle(ctypes.Structure):
            _fields_ = [("reserved", ctypes.c_char * 64)]

        for k in range(blob_bytes // 64):
            handle = Handle()
            ctypes.memmove(ctypes.addressof(handle), blob[64 * k : 64 * (k + 1)], 64)
            ptr = ctypes.c_uint64(0)
            opener = getattr(cuda, "cuIpcOpenMemHandle_v2", None) or cuda.cuIpcOpenMemHandle
            rc = opener(ctypes.byref(ptr), handle, ctypes.c_uint(1))
            if rc != 0:
                raise RuntimeError("cuIpcOpenMemHandle: CUDA driver error %d" % rc)
            self.bases.append(ptr.value)
        self.shift = cfg["arena_shift"]
        self.start = torch.cuda.Event(enable_timing=True)
        self.stop = torch.cuda.Event(enable_timing=True)

    def model_for(self, key):
        model = self.models.get(key)
        if model is not None:
            return model
        dims = self.cases.get(key)
        if dims is None:
            raise RuntimeError("tensors shaped %s match no case of the task" % (key,))
        torch = self.torch
        self.namespace.update(dims)
        torch.manual_seed(0)
        model = self.namespace["Model"](*self.namespace["get_init_inputs"]())
        if self.cuda:
            model = model.cuda()
        if self.compile:
            model = torch.compile(model)
        state = dict(model.named_parameters())
        state.update(dict(model.named_buffers()))
        self.models[key] = (model, state)
        return self.models[key]

    def view(self, data, dtype, shape):
        key = (data, dtype, shape)
        cached = self.views.get(key)
        if cached is not None:
            return cached
        torch = self.torch
        dt = self.dtypes.get(dtype)
        if dt is None:
            raise RuntimeError("unknown dtype code %d" % dtype)
        count = 1
        for s in shape:
            count *= s
        size = count * torch.empty((), dtype=dt).element_size()
        if self.cuda:
            arena, offset = data >> self.shift, data & ((1 << self.shift) - 1)
            if arena >= len(self.bases):
                raise RuntimeError("a tensor outside the device arenas")
            t = self.device_view(self.bases[arena] + offset, dt, shape, size)
        else:
            offset = data - self.base
            if offset < 0 or offset + size > self.arena_bytes:
                raise RuntimeError("a tensor outside the arena")
            if count == 0:
                t = torch.empty(shape, dtype=dt)
            else:
                t = torch.frombuffer(self.arena.buf, dtype=dt, count=count, offset=offset).view(shape)
        if len(self.views) > 512:
            self.views.clear()
        self.views[key] = t
        return t

    def device_view(self, ptr, dt, shape, size):
        torch = self.torch
        byte = torch.uint8

        class Memory:
            __cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (ptr, False), "version": 2}

        raw = torch.as_tensor(Memory(), device="cuda")
        assert raw.dtype == byte
        return raw.view(dt).view(shape) if size else torch.empty(shape, dtype=dt, device="cuda")

    def call(self):
        torch = self.torch
        arena = self.arena
        n_in, n_out = arena.i32("n_inputs"), arena.i32("n_outputs")
        if n_in != len(self.inputs) or n_out != len(self.outputs):
            raise RuntimeError("called with %d inputs and %d outputs" % (n_in, n_out))
        ins = [arena.descriptor("inputs", i) for i in range(n_in)]
        outs = [arena.descriptor("outputs", i) for i in range(n_out)]
        model, state = self.model_for(tuple(d[2] for d in ins + outs))
        args = []
        for spec, d in zip(self.inputs, ins):
            t = self.view(*d)
            if spec.get("param"):
                target = state.get(spec["param"])
                if target is None:
                    raise RuntimeError("the module has no parameter or buffer '%s'" % spec["param"])
                if target.shape != t.shape or target.dtype != t.dtype:
                    raise RuntimeError("'%s' is %s %s in the module, %s %s in task.yaml" % (
                        spec["param"], target.dtype, tuple(target.shape), t.dtype, tuple(t.shape)))
                target.data = t
            else:
                args.append(t)
        with torch.no_grad():
            if self.cuda:
                self.start.record()
                result = model(*args)
                torch.cuda.synchronize()
                self.stop.record()
                self.stop.synchronize()
                us = self.start.elapsed_time(self.stop) * 1e3
            else:
                t0 = time.perf_counter_ns()
                result = model(*args)
                us = (time.perf_counter_ns() - t0) / 1e3
            results = list(result) if isinstance(result, (tuple, list)) else [result]
            if len(results) != n_out:
                raise RuntimeError("forward returned %d tensors, the task has %d outputs" % (len(results), n_out))
            for spec, d, value in zip(self.outputs, outs, results):
                out = self.view(*d)
                if not isinstance(value, torch.Tensor) or tuple(value.shape) != tuple(out.shape):
                    got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                    raise RuntimeError("forward returned %s for '%s', task.yaml says %s" % (
                        got, spec["name"], tuple(out.shape)))
                out.copy_(value)
            if self.cuda:
                torch.cuda.synchronize()
        return us


def main():
    libc = ctypes.CDLL(None, use_errno=True)
    # Before anything else: no other process of this user may read or write this one's memory.
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    with os.fdopen(4, "rb") as f:
        cfg = json.loads(f.read())
    arena = Arena(cfg)
    arena.put_u32("guard", 1)
    try:
        contestant = Contestant(cfg, arena)
    except BaseException as e:  # the task's module will not load: the evaluator's problem, never a verdict
        arena.put_error("%s: %s: %s" % (cfg["file"], type(e).__name__, e))
        arena.put_u32("state", STATE_SETUP_FAILED)
        os._exit(0)
    arena.put_u32("state", STATE_READY)
    last = 0
    while True:
        seq = arena.u32("seq")
        while seq == last:
            seq = arena.u32("seq")
        last = seq
        arena.put_error("")
        try:
            us = contestant.call()
            arena.put_i32("rc", 0)
        except Exception as e:
            us = 0.0
            arena.put_error("%s: %s" % (type(e).__name__, e))
            arena.put_i32("rc", 1)
        arena.put_f64("reported_us", us)
        arena.put_u32("done_seq", seq)
        arena.wake("done_seq")
        os.kill(os.getpid(), signal.SIGSTOP)


main()
