#!/usr/bin/env python3
"""The compose stack as a cluster user runs it (`make compose-test`).

Builds the images, brings docker/docker-compose.yml up with three compiler replicas, submits a CPU task from
the host's `kiln` CLI, kills a compiler and the tester while they hold jobs, and checks that:
  - the killed containers come back by themselves and the campaign completes, every candidate scored once;
  - the promoted kernel lands in the registry volume;
  - Prometheus's `up` lists every replica with `service` and `replica` labels;
  - every query of every Grafana panel returns data, after a job was dead-lettered on purpose (a compile
    job whose payload is no CompileRequest), so that the dead-letter query has something to show; only
    the queries that need what this stack has not are left out, each named with the reason: the GPU
    gauges (no GPU tester) and the LLM token counter (the stack's llm-bridge runs the tuner, no LLM).
Then tears the stack down (volumes included) unless --keep.

With --cuda-compile: builds the kiln-cuda image instead (docker/cuda-toolkit.sh packs the host's toolkit)
and checks that its compilers build program 0 of every bundled CUDA task; no GPU is needed for that part,
and the test jobs wait in the queue for a GPU tester.

Exit codes: 0 passed, 1 failed, 77 skipped (no Docker daemon here).
"""
import argparse
import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "common"))
from stack_harness import Failure, check, compose_command, eventually, log, run, use_name  # noqa: E402

use_name("compose-test")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPOSE_FILE = os.path.join(ROOT, "docker", "docker-compose.yml")
FAST_FILE = os.path.join(ROOT, "tests", "compose", "fast.yml")
DASHBOARD = os.path.join(ROOT, "docker", "grafana", "dashboards", "kiln.json")
KILN_SERVICES = ["broker", "task-ingest", "llm-bridge", "compiler", "tester", "scorer", "promoter"]
COMPILERS = 3
# Dashboard queries this stack cannot answer, by the metric they read, and why.
UNANSWERABLE = (("kiln_gpu_", "needs a GPU tester; this stack has none"),
                ("kiln_llm_tokens_total", "needs an LLM endpoint; the stack's llm-bridge runs the tuner"))
DEAD_LETTER_JOB = "compose-test:not-a-compile-request"


class Stack:
    def __init__(self, args):
        self.args = args
        self.compose = compose_command() + ["-p", args.project, "-f", COMPOSE_FILE, "-f", FAST_FILE]
        self.kiln = [args.kiln, "--broker", f"tcp://127.0.0.1:{args.broker_port}"]
        self.env = dict(os.environ, KILN_PUBLISH_ADDR="127.0.0.1")

    def dc(self, *argv, timeout=900, check_rc=True, capture=True):
        r = subprocess.run(self.compose + list(argv), cwd=ROOT, env=self.env, timeout=timeout, text=True,
                           stdout=subprocess.PIPE if capture else None, stderr=subprocess.STDOUT if capture else None)
        if check_rc and r.returncode != 0:
            raise Failure(f"compose {' '.join(argv)} exited {r.returncode}:\n{(r.stdout or '')[-4000:]}")
        return r

    def kiln_json(self, *argv, timeout=60):
        r = run(self.kiln + ["--json"] + list(argv), timeout=timeout)
        return json.loads(r.stdout)

    def containers(self, service):
        r = self.dc("ps", "-q", service)
        return [c for c in r.stdout.split() if c]

    def inspect(self, cid):
        return json.loads(run(["docker", "inspect", cid]).stdout)[0]

    def prom(self, query):
        url = "http://127.0.0.1:9090/api/v1/query?" + urllib.parse.urlencode({"query": query})
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise Failure(f"Prometheus refused {query!r}: {body}")
        return body["data"]["result"]


def crash_worker(stack, service):
    """SIGKILL, from the host, the container process of a worker that holds a `service` job: a crash, so the
    restart policy applies (unlike `docker kill`, which Docker counts as a deliberate stop)."""
    def holder():
        for w in stack.kiln_json("status")["workers"]:
            if w["service"] == service and w["in_flight"] > 0:
                return w
        return None
    w = eventually(holder, 300, 0.1, f"a {service} worker holding a job")
    # A container's hostname is its short id, and a worker's default id is "<name>-<hostname>-<pid>".
    cid = next((c for c in stack.containers("compiler" if service == "compile" else "tester")
                if c[:12] in w["worker_id"] or c[:12] == w.get("host")), None)
    check(cid is not None, f"{service} worker {w['worker_id']} maps to a container")
    pid = stack.inspect(cid)["State"]["Pid"]
    os.kill(pid, 9)
    log(f"killed {service} worker {w['worker_id']} (container {cid[:12]}, host pid {pid}) holding a job")
    return cid


def check_isolation(stack):
    """What runs candidates holds nothing worth forging: the tester's root is read-only and it mounts no
    volume (scratch is tmpfs); the registry volume is mounted by the promoter alone; and the tester says its
    candidates run confined."""
    for cid in stack.containers("tester"):
        st = stack.inspect(cid)
        check(st["HostConfig"].get("ReadonlyRootfs") is True, f"tester {cid[:12]} has a read-only root")
        check(not st.get("Mounts"), f"tester {cid[:12]} mounts no volume ({[m.get('Name') for m in st.get('Mounts', [])]})")
    holders = []
    for service in KILN_SERVICES:
        for cid in stack.containers(service):
            if any((m.get("Name") or "").endswith("_kiln-registry") for m in stack.inspect(cid).get("Mounts", [])):
                holders.append(service)
    check(sorted(set(holders)) == ["promoter"], f"only the promoter mounts the registry volume ({holders})")
    workers = [w for w in stack.kiln_json("status")["workers"] if w["service"] == "test.cpu"]
    check(bool(workers) and all(w.get("confinement") == "confined" for w in workers),
          f"every tester confines its candidates ({[w.get('confinement') for w in workers]})")


def cuda_compile_check(stack, args):
    """The CUDA image's compilers build every bundled CUDA task (program 0) without a GPU."""
    run(["bash", os.path.join(ROOT, "docker", "cuda-toolkit.sh")], timeout=900, capture=False)
    if not args.no_build:
        t = time.time()
        stack.dc("--profile", "gpu", "build", timeout=3600, capture=False)
        log(f"kiln and kiln-cuda built in {time.time() - t:.0f} s")
    stack.dc("down", "-v", "--remove-orphans", check_rc=False)
    stack.dc("--profile", "gpu", "up", "-d", "--scale", "compiler-cuda=2", "broker", "task-ingest", "llm-bridge",
             "scorer", "promoter", "compiler-cuda", capture=False)
    eventually(lambda: sum(w["service"] == "compile" for w in stack.kiln_json("status")["workers"]) >= 2, 120, 1.0,
               "the CUDA compilers to register")
    tasks = sorted(d for d in os.listdir(os.path.join(ROOT, "configs", "tasks")) if d.startswith("cuda_"))
    for task in tasks:
        stack.kiln_json("submit", os.path.join(ROOT, "configs", "tasks", task), "--budget", "0")
    def compiled():
        q = {x["service"]: x for x in stack.kiln_json("status")["queues"]}
        c = q.get("compile", {})
        return q if c.get("done", 0) + c.get("failed", 0) + c.get("dead", 0) >= len(tasks) else None
    t = time.time()
    q = eventually(compiled, 600, 2.0, "the compile jobs of the CUDA tasks")
    c, waiting = q["compile"], q.get("test.cuda", {})
    log(f"compile queue after {time.time() - t:.0f} s: {c}; test.cuda: {waiting}")
    check(c["done"] >= len(tasks) and c.get("failed", 0) == 0 and c.get("dead", 0) == 0,
          f"the CUDA image compiled program 0 of all {len(tasks)} bundled CUDA tasks ({', '.join(tasks)})")
    check(waiting.get("queued", 0) == len(tasks), f"their test jobs wait for a GPU tester ({waiting.get('queued')})")
    return 0


def crash_until_requeued(stack, service, attempts=5):
    """Crash workers holding a `service` job until the broker has requeued one: a short job may finish between
    the status reply and the kill, and then nothing was lost and nothing is proven."""
    for _ in range(attempts):
        cid = crash_worker(stack, service)
        def requeued():
            r = stack.prom(f'sum(kiln_jobs_requeued_total{{service="{service}"}})')
            return bool(r) and float(r[0]["value"][1]) >= 1
        try:
            eventually(requeued, 15, 1.0, f"the broker to requeue the {service} job")
            log(f"ok: the broker requeued the killed worker's {service} job")
            return cid
        except Failure:
            log(f"the {service} job finished before the kill landed; crashing another holder")
    raise Failure(f"no {service} job was requeued after {attempts} crashes")


def dead_letter_a_job(stack, broker_port):
    """SUBMITs a compile job whose payload is no CompileRequest (the wire format of clients/python): the
    compiler dead-letters it as the job's own fault, and the broker counts it in kiln_jobs_dead_total."""
    try:
        import zmq
        sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
        from kiln_bridge import PROTOCOL_TAG, pack
    except ImportError as e:
        raise Failure(f"the dead-letter check needs python3-zmq and python3-msgpack (make deps): {e}")
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(f"tcp://127.0.0.1:{broker_port}")
        sock.send_multipart([PROTOCOL_TAG, b"SUBMIT", pack({"service": "compile", "job_id": DEAD_LETTER_JOB,
                                                           "payload": b"not a CompileRequest", "timeout_s": 0.0})])
        check(sock.poll(10000) != 0, "the broker answers a raw SUBMIT")
        frames = sock.recv_multipart()
        check(len(frames) >= 2 and frames[1] == b"ACK", f"the raw SUBMIT is acknowledged ({frames[:2]})")
    finally:
        sock.close()
        ctx.term()

    def dead():
        r = stack.prom('sum(kiln_jobs_dead_total{service="compile"})')
        return bool(r) and float(r[0]["value"][1]) >= 1
    eventually(dead, 120, 2.0, "the broker to count the dead-lettered compile job")
    log(f"ok: the compile job {DEAD_LETTER_JOB} was dead-lettered")


def check_panels(stack):
    """Every query of every dashboard panel returns data, but those UNANSWERABLE names (each logged)."""
    dash = json.load(open(DASHBOARD))
    silent = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            expr = target.get("expr")
            if not expr:
                continue
            why = next((why for metric, why in UNANSWERABLE if metric in expr), None)
            if why:
                log(f"panel '{panel['title']}': {expr}: not checked: {why}")
                continue
            try:
                series = eventually(lambda: stack.prom(expr), 120, 3.0, f"'{expr}' to return data")
                log(f"panel '{panel['title']}': {expr}: {len(series)} series")
            except Failure:
                silent.append(f"{panel['title']}: {expr}")
    check(not silent, f"every query of every panel returns data (silent: {silent})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "bin", "kiln"), help="the host's kiln CLI")
    ap.add_argument("--project", default="kilntest", help="compose project name")
    ap.add_argument("--broker-port", type=int, default=5555)
    ap.add_argument("--budget", type=int, default=12)
    ap.add_argument("--keep", action="store_true", help="leave the stack running afterwards")
    ap.add_argument("--no-build", action="store_true", help="use the images already built")
    ap.add_argument("--cuda-compile", action="store_true",
                    help="build the kiln-cuda image and check its compilers build the bundled CUDA tasks")
    args = ap.parse_args()

    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        log("SKIP: no Docker daemon reachable (start dockerd, or run as a user in the docker group)")
        return 77
    if not os.access(args.kiln, os.X_OK):
        log(f"FAIL: no kiln CLI at {args.kiln} (make build)")
        return 1

    stack = Stack(args)
    started = time.time()
    try:
        run(["bash", os.path.join(ROOT, "docker", "base-image.sh")], timeout=900, capture=False)
        if args.cuda_compile:
            rc = cuda_compile_check(stack, args)
            log(f"PASS in {time.time() - started:.0f} s")
            return rc
        if not args.no_build:
            t = time.time()
            stack.dc("build", timeout=3600, capture=False)
            log(f"images built in {time.time() - t:.0f} s")
        stack.dc("down", "-v", "--remove-orphans", check_rc=False)

        # As the README and the compose file's header say: a plain `up` (Grafana, in a profile of its own, is
        # left out), then Grafana where its image is here.
        stack.dc("up", "-d", "--scale", f"compiler={COMPILERS}", capture=False)
        running = set(stack.dc("ps", "--services", "--filter", "status=running").stdout.split())
        check(running == set(KILN_SERVICES + ["prometheus"]),
              f"a plain `up` starts every Kiln service and Prometheus, not Grafana ({sorted(running)})")
        grafana_image = os.environ.get("KILN_GRAFANA_IMAGE", "grafana/grafana-oss:10.4.2")
        have_grafana = run(["docker", "image", "inspect", grafana_image], check_rc=False).returncode == 0
        if have_grafana:
            stack.dc("--profile", "grafana", "up", "-d", "grafana", capture=False)
        else:
            log(f"no {grafana_image} image here (no registry?): Grafana itself is not started; its panels' "
                f"queries are checked against Prometheus")

        # Every worker registers with the broker.
        def workers_ready():
            ws = stack.kiln_json("status")["workers"]
            by = {}
            for w in ws:
                by[w["service"]] = by.get(w["service"], 0) + 1
            return by if by.get("compile", 0) >= COMPILERS and by.get("test.cpu", 0) >= 1 else None
        by = eventually(workers_ready, 120, 1.0, "the workers to register")
        log(f"workers: {by}")
        check_isolation(stack)

        # A campaign from the host CLI.
        sub = stack.kiln_json("submit", os.path.join(ROOT, "tests", "data", "tasks", "fast_cpu"),
                              "--budget", str(args.budget))
        cid = sub["campaign_id"]
        log(f"campaign {cid} submitted")

        killed = {s: crash_until_requeued(stack, s) for s in ("compile", "test.cpu")}

        def finished():
            for c in stack.kiln_json("status")["campaigns"]:
                if c["campaign_id"] == cid and c["state"] == "done":
                    return c
            return None
        info = eventually(finished, 600, 2.0, f"campaign {cid} to finish")
        check(info["scored"] == args.budget + 1, f"program 0 and {args.budget} proposals scored ({info['scored']})")
        best = stack.kiln_json("best", cid, "--top", "100")
        ids = [p["id"] for p in best["programs"]]
        check(len(ids) == args.budget + 1 and len(set(ids)) == len(ids),
              f"every candidate scored exactly once ({len(ids)} rows, {len(set(ids))} distinct)")
        check(len(info["promoted"]) >= 1, f"the campaign promoted a kernel ({info['promoted']})")

        # The killed containers came back by themselves.
        for service, container in killed.items():
            st = stack.inspect(container)
            check(st["RestartCount"] >= 1 and st["State"]["Running"],
                  f"the killed {service} container restarted (RestartCount {st['RestartCount']})")
        requeued = stack.prom('sum by (service) (kiln_jobs_requeued_total)')
        requeued = {r["metric"].get("service"): float(r["value"][1]) for r in requeued}
        log(f"requeued jobs by service: {requeued}")

        # The registry volume holds the promoted kernel, written by the promoter running as the kiln user.
        vol = f"{args.project}_kiln-registry"
        r = run(["docker", "run", "--rm", "-v", f"{vol}:/r:ro", os.environ.get("KILN_IMAGE", "kiln:latest"),
                 "cat", "/r/verified_kernels.json"])
        registry = json.loads(r.stdout)
        entries = registry.get("kernels", registry if isinstance(registry, list) else [])
        promoted = set(info["promoted"])
        found = [e for e in entries if e.get("kernel_id", e.get("id")) in promoted]
        check(len(found) == len(promoted), f"the registry volume holds the promoted kernels {sorted(promoted)}")

        # Prometheus sees every replica, labelled.
        expected = {s: 1 for s in KILN_SERVICES}
        expected["compiler"] = COMPILERS

        def all_up():
            res = stack.prom("up")
            got = {}
            for r in res:
                m = r["metric"]
                if m.get("job") == "kiln" and r["value"][1] == "1" and m.get("replica"):
                    got.setdefault(m.get("service"), set()).add(m["replica"])
            return got if all(len(got.get(s, ())) >= n for s, n in expected.items()) else None
        got = eventually(all_up, 120, 2.0, "Prometheus to see every replica up")
        check(True, "Prometheus `up`: " + ", ".join(f"{s}={len(v)}" for s, v in sorted(got.items())))

        # A job dead-lettered on purpose, then every query of the dashboard answers.
        dead_letter_a_job(stack, args.broker_port)
        check_panels(stack)

        if have_grafana:
            def grafana_dash():
                with urllib.request.urlopen("http://127.0.0.1:3000/api/search?query=Kiln", timeout=5) as r:
                    return json.load(r)
            check(bool(eventually(grafana_dash, 120, 3.0, "Grafana to provision the dashboard")),
                  "Grafana provisioned the Kiln dashboard")
        log(f"PASS in {time.time() - started:.0f} s")
        return 0
    except (Failure, subprocess.TimeoutExpired) as e:
        log(f"FAIL: {e}")
        try:
            logs = stack.dc("logs", "--no-color", "--tail", "40", check_rc=False)
            print(logs.stdout[-20000:])
        except Exception:
            pass
        # Again after the logs, so that the last lines of a long run say what failed.
        log(f"FAIL after {time.time() - started:.0f} s: {e}")
        return 1
    finally:
        if not args.keep:
            stack.dc("--profile", "gpu", "--profile", "grafana", "down", "-v", "--remove-orphans", check_rc=False,
                     timeout=300)


if __name__ == "__main__":
    sys.exit(main())
