#!/usr/bin/env python3
"""Kiln's reference external bridge: plug your own agent into a Kiln campaign.

The bridge connects to the broker's CURVE endpoint (broker.external_bind), says READY for the service
"propose.external", and for every JOB (a ProposalRequest) calls your function

    propose(request: ProposalRequest) -> Proposal | str | None

then answers RESULT with one follow-up job: the candidate's "compile" job (a CompileRequest). If your
function raises or returns None, the scorer is told the proposal failed (a ScoreResult at stage
"propose"), exactly as Kiln's own llm-bridge does. The protocol is documented in docs/bridge-protocol.md;
this file is its reference implementation and uses only Debian's python3-zmq and python3-msgpack.

    python3 kiln_bridge.py --endpoint tcp://broker:5557 --server-key broker.pub \\
        --key mybridge.key --agent example_agent.py
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib
import importlib.util
import json
import logging
import os
import re
import signal
import socket as pysocket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Union

import msgpack
import zmq
import zmq.utils.z85

# ----------------------------------------------------------------------------------------- wire format
# Every message: ["KILN1"][command][msgpack map]. The map carries "v": 1 (the schema version); readers
# ignore keys they do not know and a key never changes type (proto-msgs/include/kiln/proto/wire.h).

PROTOCOL_TAG = b"KILN1"
SCHEMA_VERSION = 1
READY, JOB, RESULT = b"READY", b"JOB", b"RESULT"
HEARTBEAT, DISCONNECT = b"HEARTBEAT", b"DISCONNECT"
REQUEST, REPLY = b"REQUEST", b"REPLY"
ACK = b"ACK"
KNOWN_COMMANDS = {READY, JOB, RESULT, HEARTBEAT, DISCONNECT, b"SUBMIT", ACK, REQUEST, REPLY}

DEFAULT_SERVICE = "propose.external"
MAX_MESSAGE_BYTES = 64 << 20  # ZMQ_MAXMSGSIZE, as on every Kiln socket


class WireError(ValueError):
    """A malformed message: counted and dropped, never fatal."""


def pack(fields: Dict[str, Any]) -> bytes:
    """A message body: str -> msgpack str, bytes -> msgpack bin, with the version key first."""
    body = {"v": SCHEMA_VERSION}
    body.update(fields)
    return msgpack.packb(body, use_bin_type=True, unicode_errors="surrogateescape")


def unpack(frame: bytes, max_bytes: int = MAX_MESSAGE_BYTES) -> Dict[str, Any]:
    """Bounded decode of one body; it must be a single map with a version."""
    if len(frame) > max_bytes:
        raise WireError("frame too large")
    try:
        obj = msgpack.unpackb(frame, raw=False, strict_map_key=True, unicode_errors="surrogateescape",
                              max_str_len=max_bytes, max_bin_len=max_bytes, max_array_len=1 << 20,
                              max_map_len=1 << 16)
    except Exception as e:  # msgpack raises several types for bad input
        raise WireError("malformed msgpack: %s" % e) from None
    if not isinstance(obj, dict):
        raise WireError("message body is not a map")
    if not isinstance(obj.get("v"), int) or obj["v"] < 1:
        raise WireError("message has no version field 'v'")
    return obj


def as_bytes(v: Any) -> bytes:
    """Kiln writes blobs as bin; accept str too (readers are lenient, writers are strict)."""
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8", "surrogateescape")
    return b""


# ----------------------------------------------------------------------------------------- the task

EVOLVE_START = "[EVOLVE_START]"
EVOLVE_END = "[EVOLVE_END]"


def parse_task_yaml(text: str) -> Dict[str, Any]:
    """The few task.yaml keys a bridge needs (name, op, backend, dtype, params), without a YAML library.

    The task was validated by Kiln's ingest before any ProposalRequest exists, so the simple shapes that
    validation allows are all this has to read: top-level `key: value`, and under `params:` the lines
    `  NAME: [v1, v2, ...]`.
    """
    out: Dict[str, Any] = {"params": {}}
    in_params = False
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        top = re.match(r"^([A-Za-z_][A-Za-z0-9_]*):\s*(.*)$", line)
        if top:
            key, value = top.group(1), top.group(2).strip().strip("\"'")
            in_params = key == "params"
            if key in ("name", "op", "backend", "dtype"):
                out[key] = value
            continue
        if in_params:
            m = re.match(r"^\s+([A-Za-z_][A-Za-z0-9_]*):\s*\[(.*)\]\s*$", line)
            if m:
                out["params"][m.group(1)] = [v.strip().strip("\"'") for v in m.group(2).split(",") if v.strip()]
    return out


def region_spans(code: str) -> List[tuple]:
    """(start, end) offsets of every editable region's text, between its marker lines, in order.

    Kiln (libs/task regions.cc) is the judge of the markers; this only finds them in well-formed code: a
    line holding EVOLVE_START opens a region after it, the next line holding EVOLVE_END closes it.
    """
    spans, start, pos = [], None, 0
    for line in code.splitlines(keepends=True):
        if EVOLVE_START in line and start is None:
            start = pos + len(line)
        elif EVOLVE_END in line and start is not None:
            spans.append((start, pos))
            start = None
        pos += len(line)
    return spans


@dataclass
class ProposalRequest:
    """A ProposalRequest (proto-msgs payloads.h) with helpers. `raw` keeps every key as received."""

    program_id: str
    proposal_index: int
    proposer: str
    seed: int
    parent: Dict[str, Any]
    parent_eval_log: str
    files: Dict[str, bytes]
    task: Dict[str, Any]
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def parent_code(self) -> str:
        return self.parent.get("code", "")

    @property
    def parent_params(self) -> Dict[str, str]:
        return dict(self.parent.get("params") or {})

    @property
    def campaign_id(self) -> str:
        if self.parent.get("campaign_id"):
            return self.parent["campaign_id"]
        pos = self.program_id.rfind("/p")
        return self.program_id[:pos] if pos >= 0 else ""

    def file_text(self, name: str) -> str:
        return as_bytes(self.files.get(name, b"")).decode("utf-8", "replace")

    def regions(self) -> List[str]:
        """The bodies of the parent's editable regions (the text between each pair of marker lines)."""
        return [self.parent_code[b:e] for b, e in region_spans(self.parent_code)]

    def region(self, index: int = 0) -> str:
        """The parent's editable region `index` (the first by default), or "" if it has none."""
        bodies = self.regions()
        return bodies[index] if index < len(bodies) else ""

    def with_regions(self, bodies: List[str]) -> str:
        """The parent's whole kernel file with every editable region replaced, one body per region."""
        spans = region_spans(self.parent_code)
        if len(bodies) != len(spans):
            raise ValueError("%d region bodies for %d editable regions" % (len(bodies), len(spans)))
        out, pos = [], 0
        for (b, e), text in zip(spans, bodies):
            if text and not text.endswith("\n"):
                text += "\n"
            out += [self.parent_code[pos:b], text]
            pos = e
        return "".join(out) + self.parent_code[pos:]

    def with_region(self, text: str, index: int = 0) -> str:
        """The parent's whole kernel file with its editable region `index` replaced by `text`."""
        bodies = self.regions()
        if index >= len(bodies):
            raise ValueError("the parent's code has no %s ... %s region %d" % (EVOLVE_START, EVOLVE_END, index))
        bodies[index] = text
        return self.with_regions(bodies)

    @staticmethod
    def from_payload(body: Dict[str, Any]) -> "ProposalRequest":
        files = {str(k): as_bytes(v) for k, v in (body.get("files") or {}).items()}
        task = parse_task_yaml(as_bytes(files.get("task.yaml", b"")).decode("utf-8", "replace"))
        return ProposalRequest(
            program_id=str(body.get("program_id", "")),
            proposal_index=int(body.get("proposal_index", 0)),
            proposer=str(body.get("proposer", "") or "external"),
            seed=int(body.get("seed", 0)),
            parent=dict(body.get("parent") or {}),
            parent_eval_log=str(body.get("parent_eval_log", "")),
            files=files,
            task=task,
            raw=body,
        )


@dataclass
class Proposal:
    """What an agent returns: the whole kernel file (`code`), or only the new bodies of the editable
    regions (`regions`, one per region in order; `region` for a kernel with one), the template parameters
    to build it with (default: the parent's), and a note on what it tried.

    Kiln splices region bodies into the task's kernel. A whole file must equal the task's kernel outside
    the regions, byte for byte; one that changed anything there is scored 0 with the line it changed."""

    code: Optional[str] = None
    region: Optional[str] = None
    params: Optional[Dict[str, Any]] = None
    notes: str = ""
    regions: Optional[List[str]] = None


ProposeFn = Callable[[ProposalRequest], Union[Proposal, str, None]]


# ----------------------------------------------------------------------------------------- the answer

def candidate_of(req: ProposalRequest) -> Dict[str, Any]:
    """The Candidate fields the scorer assigns; a proposal never changes them."""
    return {
        "campaign_id": req.campaign_id,
        "program_id": req.program_id,
        "parent_id": str(req.parent.get("program_id", "")),
        "generation": int(req.parent.get("generation", 0)) + 1,
        "proposal_index": req.proposal_index,
        "proposer": req.proposer,
    }


def follow_up(service: str, job_id: str, payload: bytes) -> Dict[str, Any]:
    return {"service": service, "job_id": job_id, "payload": payload, "timeout_s": 0.0}


def compile_follow_up(req: ProposalRequest, proposal: Union[Proposal, str], cuda_arch: str) -> Dict[str, Any]:
    """The "compile" job (a CompileRequest) for the candidate the agent proposed."""
    if isinstance(proposal, str):
        # A whole file keeps its markers; anything else is the new text of the editable region.
        proposal = Proposal(code=proposal) if EVOLVE_START in proposal else Proposal(region=proposal)
    code, bodies = "", []
    if proposal.code is not None:
        code = proposal.code
        if not code.strip():
            raise ValueError("the proposal's code is empty")
    elif proposal.regions is not None:
        bodies = [str(b) for b in proposal.regions]
    elif proposal.region is not None:
        bodies = [proposal.region]
    else:
        raise ValueError("the proposal has neither code nor regions")
    if not code and not bodies:
        raise ValueError("the proposal has no region bodies")
    params = req.parent_params if proposal.params is None else proposal.params
    cand = candidate_of(req)
    # Kiln checks the file (or splices the bodies into the task's kernel) before building anything.
    cand.update({"code": code, "regions": bodies, "params": {str(k): str(v) for k, v in params.items()},
                 "notes": proposal.notes})
    backend = req.task.get("backend", "")
    if backend not in ("cpu", "cuda"):
        raise ValueError("task.yaml: backend: expected cpu | cuda, got %r" % backend)
    compile_request = {
        "cand": cand,
        "backend": backend,
        "arch": cuda_arch if backend == "cuda" else "native",
        "files": req.files,
        # The campaign's screening bar for the candidate's first measurement, passed on as given.
        "screen_below": float(req.raw.get("screen_below", 0) or 0),
        # Whether the proposer reads profiler feedback: this bridge's proposals may, unless told otherwise.
        "want_profile": bool(req.raw.get("want_profile", True)),
    }
    return follow_up("compile", req.program_id + ":compile", pack(compile_request))


def failure_follow_up(req: ProposalRequest, error: str) -> Dict[str, Any]:
    """Tells the scorer this proposal failed (a ScoreResult at stage "propose"), so the campaign goes on."""
    result = {"kind": "result", "cand": candidate_of(req), "stage": "propose", "error": error[:2000]}
    return follow_up("score", req.program_id + ":score", pack(result))


def answer_job(job: Dict[str, Any], propose: ProposeFn, cuda_arch: str) -> Dict[str, Any]:
    """The RESULT body for one JOB. Never raises: an agent's failure is a result too."""
    result = {"job_id": job.get("job_id", ""), "attempt": job.get("attempt", 1), "outcome": "ok",
              "payload": b"", "error": "", "next": []}
    try:
        req = ProposalRequest.from_payload(unpack(as_bytes(job.get("payload"))))
    except (WireError, TypeError, ValueError) as e:
        result.update(outcome="failed", error="bad ProposalRequest: %s" % e)
        return result
    if not req.program_id:
        result.update(outcome="failed", error="ProposalRequest without program_id")
        return result
    try:
        proposal = propose(req)
        if proposal is None:
            raise ValueError("the agent returned no proposal")
        result["next"] = [compile_follow_up(req, proposal, cuda_arch)]
    except Exception as e:  # the agent is the user's code: whatever it raises is this proposal's failure
        logging.getLogger("kiln_bridge").warning("proposal %s failed: %s", req.program_id, e)
        result["next"] = [failure_follow_up(req, "external agent: %s" % e)]
    return result


# ----------------------------------------------------------------------------------------- the client

@dataclass
class BridgeOptions:
    endpoint: str
    server_public_key: bytes  # Z85 (40 bytes): the broker's, from its broker.pub
    public_key: bytes         # Z85: this bridge's, as listed on the broker's allowlist
    secret_key: bytes         # Z85: this bridge's secret
    service: str = DEFAULT_SERVICE
    worker_id: str = ""
    slots: int = 1
    heartbeat_interval_s: float = 1.0
    heartbeat_liveness: int = 4  # the broker is presumed gone after this many silent intervals
    reconnect_min_s: float = 1.0  # backoff doubles up to reconnect_max_s
    reconnect_max_s: float = 32.0
    cuda_arch: str = "sm_90"
    max_jobs: int = 0  # stop after answering this many jobs (0: never)


@dataclass
class BridgeStats:
    jobs: int = 0
    results: int = 0
    reconnects: int = 0
    rejected_frames: int = 0
    refusals: int = 0  # ACKs with an error: the broker refused our READY or a RESULT


class Bridge:
    """One DEALER socket, owned by the run() thread; the agent runs on `slots` pool threads."""

    def __init__(self, options: BridgeOptions, propose: ProposeFn, context: Optional[zmq.Context] = None):
        self.opt = options
        if not self.opt.worker_id:
            self.opt.worker_id = "%s-%d-%s" % (pysocket.gethostname(), os.getpid(), os.urandom(3).hex())
        self.propose = propose
        self.ctx = context or zmq.Context.instance()
        self.stats = BridgeStats()
        self.stop = threading.Event()
        self.log = logging.getLogger("kiln_bridge")
        self.sock: Optional[zmq.Socket] = None
        self.last_recv = self.last_send = 0.0
        self.reconnect_now = False

    # -- socket

    def connect(self) -> None:
        if self.sock is not None:
            self.sock.close(linger=0)
        s = self.ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        s.setsockopt(zmq.RECONNECT_IVL, int(self.opt.reconnect_min_s * 1000))
        s.setsockopt(zmq.RECONNECT_IVL_MAX, int(self.opt.reconnect_max_s * 1000))
        s.setsockopt(zmq.SNDHWM, 10000)
        s.setsockopt(zmq.RCVHWM, 10000)
        s.curve_serverkey = self.opt.server_public_key
        s.curve_publickey = self.opt.public_key
        s.curve_secretkey = self.opt.secret_key
        s.connect(self.opt.endpoint)
        self.sock = s
        caps = {"backend": "", "gpu_name": "", "gpu_uuid": "", "arch": "", "toolchain": "kiln_bridge.py",
                "host": pysocket.gethostname()}
        self.send(READY, {"service": self.opt.service, "worker_id": self.opt.worker_id, "slots": self.opt.slots,
                          "caps": caps})
        self.last_recv = time.monotonic()

    def send(self, command: bytes, fields: Dict[str, Any]) -> None:
        try:
            self.sock.send_multipart([PROTOCOL_TAG, command, pack(fields)], flags=zmq.DONTWAIT)
        except zmq.Again:
            # Not connected (yet, or the CURVE handshake was refused). A lost heartbeat is harmless; a lost
            # RESULT is recovered by the broker, which requeues the job when its lease ends.
            level = logging.WARNING if command == RESULT else logging.DEBUG
            self.log.log(level, "send %s: not connected, dropped", command.decode())
        self.last_send = time.monotonic()

    def recv(self) -> Optional[tuple]:
        """One message without blocking: (command, body) or None; malformed ones are counted and skipped."""
        while True:
            try:
                frames = self.sock.recv_multipart(flags=zmq.DONTWAIT)
            except zmq.Again:
                return None
            if len(frames) != 3 or frames[0] != PROTOCOL_TAG or frames[1] not in KNOWN_COMMANDS:
                self.stats.rejected_frames += 1
                continue
            try:
                return frames[1], unpack(frames[2])
            except WireError as e:
                self.stats.rejected_frames += 1
                self.log.warning("rejected %s: %s", frames[1].decode(), e)

    # -- loop

    def handle(self, command: bytes, body: Dict[str, Any], pool, running: List) -> None:
        if command == JOB:
            self.stats.jobs += 1
            self.log.info("job %s (attempt %s)", body.get("job_id"), body.get("attempt"))
            running.append(pool.submit(answer_job, body, self.propose, self.opt.cuda_arch))
        elif command == REQUEST:
            self.send(REPLY, {"request_id": body.get("request_id", ""), "ok": False, "body": b"",
                              "error": "service '%s' answers no requests" % self.opt.service})
        elif command == DISCONNECT:
            self.log.info("broker asked to reconnect (%s)", body.get("reason", "no reason"))
            self.reconnect_now = True
        elif command == ACK and body.get("error"):
            # The broker refused our READY or a RESULT (and has released that job already).
            self.stats.refusals += 1
            what = "the result for %s" % body["job_id"] if body.get("job_id") else "a message"
            self.log.warning("the broker refused %s: %s", what, body["error"])
        # HEARTBEAT: any message counts as one; nothing else to do.

    def run(self) -> BridgeStats:
        backoff = self.opt.reconnect_min_s
        dead_after = self.opt.heartbeat_interval_s * self.opt.heartbeat_liveness
        running: List[concurrent.futures.Future] = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, self.opt.slots)) as pool:
            self.connect()
            self.log.info("bridge %s: READY for '%s' at %s", self.opt.worker_id, self.opt.service, self.opt.endpoint)
            while not self.stop.is_set():
                timeout_ms = max(10, int(self.opt.heartbeat_interval_s * 1000 / 4))
                if self.sock.poll(timeout_ms, zmq.POLLIN):
                    while True:
                        msg = self.recv()
                        if msg is None:
                            break
                        self.last_recv = time.monotonic()
                        backoff = self.opt.reconnect_min_s
                        self.handle(msg[0], msg[1], pool, running)
                for fut in [f for f in running if f.done()]:
                    running.remove(fut)
                    self.send(RESULT, fut.result())
                    self.stats.results += 1
                if self.opt.max_jobs and self.stats.results >= self.opt.max_jobs:
                    break
                now = time.monotonic()
                if now - self.last_send >= self.opt.heartbeat_interval_s:
                    self.send(HEARTBEAT, {})
                if self.reconnect_now or now - self.last_recv > dead_after:
                    if not self.reconnect_now:
                        # Silent broker, or a refused CURVE handshake (a key not on the allowlist looks
                        # exactly like this: the broker never sees a frame).
                        self.log.warning("broker silent for %.1f s; reconnecting in %.0f s (if this repeats, check "
                                         "that this bridge's public key is on the broker's allowlist and that "
                                         "--server-key is the broker's broker.pub)", now - self.last_recv, backoff)
                        self.stop.wait(backoff)
                        backoff = min(backoff * 2, self.opt.reconnect_max_s)
                    self.reconnect_now = False
                    self.stats.reconnects += 1
                    if not self.stop.is_set():
                        self.connect()
            # Stopping: finished results still count; unfinished jobs the broker requeues.
            for fut in running:
                if fut.done():
                    self.send(RESULT, fut.result())
                    self.stats.results += 1
            self.send(DISCONNECT, {"reason": "bridge stopping"})
        self.sock.close(linger=200)
        return self.stats


# ----------------------------------------------------------------------------------------- command line

def read_key(path: str) -> bytes:
    """A key file of `kiln keys new` (or the broker's broker.pub): one Z85 line (no comments: '#' is Z85)."""
    with open(path, "rb") as f:
        lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
    if len(lines) != 1 or len(lines[0]) != 40:
        raise ValueError("%s: expected one 40-character Z85 key" % path)
    try:
        zmq.utils.z85.decode(lines[0])
    except Exception:
        raise ValueError("%s: not a Z85 key" % path) from None
    return lines[0]


def load_agent(spec: str) -> ProposeFn:
    """`path/to/file.py[:function]` or `package.module[:function]`; the function defaults to `propose`."""
    target, _, fn = spec.partition(":")
    fn = fn or "propose"
    if target.endswith(".py") or os.path.sep in target:
        mod_spec = importlib.util.spec_from_file_location("kiln_bridge_agent", target)
        if mod_spec is None or mod_spec.loader is None:
            raise ValueError("cannot load agent file %s" % target)
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    agent = getattr(module, fn, None)
    if not callable(agent):
        raise ValueError("%s has no function %s" % (target, fn))
    return agent


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description="Kiln external bridge: serves ProposalRequests with your agent.")
    p.add_argument("--endpoint", required=True, help="the broker's external endpoint (broker.external_bind)")
    p.add_argument("--server-key", required=True, help="the broker's public key file (state dir broker.pub)")
    p.add_argument("--key", required=True, help="this bridge's secret key file (NAME.key of `kiln keys new`)")
    p.add_argument("--public-key", help="this bridge's public key file (default: --key with .pub)")
    p.add_argument("--agent", required=True, help="file.py[:function] or module[:function] (default function: propose)")
    p.add_argument("--service", default=DEFAULT_SERVICE, help="service to serve (default %(default)s)")
    p.add_argument("--slots", type=int, default=1, help="proposals worked on at once (credit)")
    p.add_argument("--cuda-arch", default="sm_90", help="nvcc target for CUDA tasks (default %(default)s)")
    p.add_argument("--heartbeat", type=float, default=1.0, help="heartbeat interval in seconds")
    p.add_argument("--reconnect-max", type=float, default=32.0, help="longest reconnect backoff in seconds")
    p.add_argument("--max-jobs", type=int, default=0, help="exit after answering this many jobs")
    p.add_argument("--exit-after", type=float, default=0, help="exit after this many seconds")
    p.add_argument("--log-level", default="info")
    a = p.parse_args(argv)
    # An agent file's `from kiln_bridge import Proposal` must find this module, not load it a second time.
    sys.modules.setdefault("kiln_bridge", sys.modules[__name__])
    logging.basicConfig(level=a.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s kiln_bridge %(levelname)s %(message)s")
    if not zmq.has("curve"):
        print("kiln_bridge: this libzmq has no CURVE support", file=sys.stderr)
        return 2
    try:
        public_path = a.public_key or re.sub(r"\.key$", "", a.key) + ".pub"
        options = BridgeOptions(endpoint=a.endpoint, server_public_key=read_key(a.server_key),
                                public_key=read_key(public_path), secret_key=read_key(a.key),
                                service=a.service, slots=max(1, a.slots), heartbeat_interval_s=a.heartbeat,
                                reconnect_max_s=a.reconnect_max, cuda_arch=a.cuda_arch, max_jobs=a.max_jobs)
        agent = load_agent(a.agent)
    except (OSError, ValueError, ImportError) as e:
        print("kiln_bridge: %s" % e, file=sys.stderr)
        return 2
    bridge = Bridge(options, agent)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: bridge.stop.set())
    if a.exit_after > 0:
        timer = threading.Timer(a.exit_after, bridge.stop.set)
        timer.daemon = True
        timer.start()
    stats = bridge.run()
    print(json.dumps({"jobs": stats.jobs, "results": stats.results, "reconnects": stats.reconnects,
                      "rejected_frames": stats.rejected_frames}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
