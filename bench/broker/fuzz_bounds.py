#!/usr/bin/python3
"""Fuzz/bounds bench for kiln-broker.

Starts build/bin/kiln-broker on free loopback ports with a temporary state dir, sends N malformed or odd
frames (garbage, wrong tags and frame counts, distinct unknown commands, non-UTF-8 and distinct invalid
service names, bodies that are not msgpack, RESULTs for jobs nobody holds, SUBMITs to ever new services,
a few bodies over max_message_bytes), then reports as JSON: /metrics size before and after, broker RSS
before and after, log lines written, frames sent, elapsed time, rejected frames by reason, whether
/metrics still passes `promtool check metrics` (when promtool is on PATH), and the lease a
propose.external job gets (the broker must still serve after the flood).

    python3 bench/broker/fuzz_bounds.py [-n 400000] [--json FILE] [--oversized 4] [--broker PATH]
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import msgpack
import zmq

TAG = b"KILN1"
MAX_MESSAGE_BYTES = 64 << 20  # broker.max_message_bytes in the built-in defaults


def pack(fields):
    body = {"v": 2}
    body.update(fields)
    return msgpack.packb(body, use_bin_type=True)


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def fetch_metrics(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read()


def rejected_by_reason(text):
    out = {}
    for m in re.finditer(rb'^kiln_broker_rejected_frames_total\{reason="([a-z_]+)"\} (\S+)$', text, re.M):
        out[m.group(1).decode()] = int(float(m.group(2)))
    return out


def promtool_ok(text):
    if shutil.which("promtool") is None:
        return None
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True)
    # promtool exits non-zero for lint warnings too; a parse error is what matters here.
    return b"error while linting" not in p.stdout + p.stderr and b"text format parsing error" not in p.stdout + p.stderr


def frame_kinds(i):
    """The i-th malformed or odd message: a list of frames."""
    k = i % 14
    n = str(i).encode()
    if k == 0:
        return [b"garbage " + n]
    if k == 1:
        return [b"NOTKILN", b"READY", b"x"]
    if k == 2:
        return [TAG, b"CMD" + n, b"x"]  # a distinct unknown command each time
    if k == 3:
        return [TAG, b"READY", pack({"service": b"\xff\xfe".decode("latin-1") + str(i), "worker_id": "w", "slots": 1})]
    if k == 4:
        return [TAG, b"READY", pack({"service": "svc " + str(i), "worker_id": "w", "slots": 1})]
    if k == 5:
        return [TAG, b"SUBMIT", pack({"service": "bad/name/" + str(i), "job_id": "j" + str(i), "payload": b""})]
    if k == 6:
        return [TAG, b"SUBMIT", b"\xc1\xc1" + n]  # not msgpack
    if k == 7:
        return [TAG, b"RESULT", pack({"job_id": "nobody-" + str(i), "attempt": 1, "outcome": "ok"})]
    if k == 8:
        return [TAG, b"RESULT", b"\xdf\xff\xff\xff\xff"]  # a map header claiming 4G entries
    if k == 9:
        return [TAG, b"READY", b"x", b"y", b"z"]  # too many frames
    if k == 10:
        return [TAG, b"REQUEST", pack({"request_id": "r" + str(i), "service": "\x00\x01" + str(i), "method": "x"})]
    if k == 11:
        return [TAG, b"REPLY", pack({"request_id": 5})]  # a key of the wrong type
    if k == 12:
        # A well-formed SUBMIT to an ever new, valid service name: the broker serves at most 256.
        return [TAG, b"SUBMIT", pack({"service": "fuzz-" + str(i), "job_id": "fuzz-job-" + str(i), "payload": b""})]
    return [TAG, b"READY", pack({"service": "ok", "worker_id": "\n" * 3 + str(i), "slots": 1})]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--frames", type=int, default=400000, help="malformed/odd messages to send (default 400000)")
    ap.add_argument("--oversized", type=int, default=4,
                    help="bodies over max_message_bytes among them: half just over (read and answered), "
                         "half over twice the limit (ZeroMQ drops the connection) (default 4)")
    ap.add_argument("--sockets", type=int, default=8, help="DEALER sockets the frames are spread over")
    ap.add_argument("--broker", default=os.path.join(root, "build", "bin", "kiln-broker"))
    ap.add_argument("--json", help="also write the report to this file")
    args = ap.parse_args()

    state = tempfile.mkdtemp(prefix="kiln-fuzz-bounds-")
    log_path = os.path.join(state, "broker.log")
    log = open(log_path, "wb")
    proc = subprocess.Popen([args.broker, "--state-dir", state, "--bind", "tcp://127.0.0.1:*",
                             "--events-bind", "tcp://127.0.0.1:*", "--metrics-host", "127.0.0.1",
                             "--metrics-port", "0"], stdout=log, stderr=subprocess.STDOUT)
    ctx = zmq.Context()
    try:
        endpoint = metrics_url = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (endpoint is None or metrics_url is None):
            text = open(log_path, "rb").read().decode("utf-8", "replace")
            m = re.search(r"serving on (tcp://\S+)", text)
            endpoint = m.group(1) if m else None
            m = re.search(r"metrics on (http://\S+)", text)
            metrics_url = m.group(1) if m else None
            if proc.poll() is not None:
                sys.exit("kiln-broker exited: " + text)
            time.sleep(0.05)
        if endpoint is None or metrics_url is None:
            sys.exit("kiln-broker did not report its endpoints")

        metrics_before = fetch_metrics(metrics_url)
        rss_before = rss_bytes(proc.pid)
        lines_before = open(log_path, "rb").read().count(b"\n")

        socks = []
        for _ in range(max(1, args.sockets)):
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SNDHWM, 100000)
            s.connect(endpoint)
            socks.append(s)
        time.sleep(0.2)

        def drain():
            for s in socks:
                while True:
                    try:
                        s.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break

        start = time.monotonic()
        over_every = args.frames // args.oversized if args.oversized > 0 else 0
        oversized_sent = 0
        for i in range(args.frames):
            s = socks[i % len(socks)]
            if over_every and i % over_every == over_every - 1 and oversized_sent < args.oversized:
                factor = 1 if oversized_sent % 2 == 0 else 2
                s.send_multipart([TAG, b"SUBMIT", b"\x00" * (factor * MAX_MESSAGE_BYTES + 1024)])
                oversized_sent += 1
            else:
                s.send_multipart(frame_kinds(i))
            if i % 5000 == 4999:
                drain()  # the broker answers some of these (ACKs, DISCONNECTs)
        sent_s = time.monotonic() - start

        # Wait until the broker has read everything: the rejection counters stop moving.
        last, stable_since = None, time.monotonic()
        while time.monotonic() - stable_since < 1.5 and time.monotonic() - start < 600:
            drain()
            now = sum(rejected_by_reason(fetch_metrics(metrics_url)).values())
            if now != last:
                last, stable_since = now, time.monotonic()
            time.sleep(0.2)
        elapsed = time.monotonic() - start

        metrics_after = fetch_metrics(metrics_url)
        rss_after = rss_bytes(proc.pid)
        lines_after = open(log_path, "rb").read().count(b"\n")

        # The broker still serves: a propose.external job reaches a worker, with its lease.
        worker = ctx.socket(zmq.DEALER)
        worker.setsockopt(zmq.LINGER, 0)
        worker.connect(endpoint)
        worker.send_multipart([TAG, b"READY", pack({"service": "propose.external", "worker_id": "probe", "slots": 1})])
        client = ctx.socket(zmq.DEALER)
        client.setsockopt(zmq.LINGER, 0)
        client.connect(endpoint)
        time.sleep(0.2)
        client.send_multipart([TAG, b"SUBMIT", pack({"service": "propose.external", "job_id": "probe:propose",
                                                     "payload": b""})])
        lease_s = None
        until = time.monotonic() + 10
        while time.monotonic() < until and lease_s is None:
            if worker.poll(100):
                frames = worker.recv_multipart()
                if len(frames) == 3 and frames[1] == b"JOB":
                    lease_s = round(msgpack.unpackb(frames[2], raw=False)["deadline"] - time.time(), 1)
            else:
                worker.send_multipart([TAG, b"HEARTBEAT", pack({})])

        try:
            metrics_after.decode("utf-8")
            utf8 = True
        except UnicodeDecodeError:
            utf8 = False
        report = {
            "frames_sent": args.frames,
            "oversized_sent": oversized_sent,
            "sockets": len(socks),
            "send_s": round(sent_s, 2),
            "elapsed_s": round(elapsed, 2),
            "metrics_bytes_before": len(metrics_before),
            "metrics_bytes_after": len(metrics_after),
            "metrics_utf8": utf8,
            "metrics_promtool_ok": promtool_ok(metrics_after),
            "rss_bytes_before": rss_before,
            "rss_bytes_after": rss_after,
            "log_lines_written": lines_after - lines_before,
            "rejected_by_reason": rejected_by_reason(metrics_after),
            "propose_external_lease_s": lease_s,
        }
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        ctx.destroy(linger=0)
        log.close()
        shutil.rmtree(state, ignore_errors=True)

    text = json.dumps(report, indent=2, sort_keys=True)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
