#!/usr/bin/env python3
"""Kiln on Docker Swarm as a cluster user runs it (`make swarm-test`).

Makes this Docker daemon a single-node swarm (unless it is in one already), labels the node for Kiln's
state, builds the images the compose stack uses (cached layers: seconds after `make compose-test`),
deploys docker/kiln-stack.yml with `docker stack deploy`, starts docker/swarm-gateway.sh, and checks that:
  - every service uses DNS round robin and only the CURVE bridge port is published on the node;
  - the broker, scorer and promoter are pinned to the labelled node, with their volumes;
  - the workers register through the overlay network, and the tester confines its candidates;
  - `docker service scale` adds compilers the way `--scale` does;
  - a CPU campaign submitted from the host CLI (through the gateway on loopback) finishes, every candidate
    scored exactly once, the promoted kernel in the registry volume;
  - Prometheus finds every replica through `tasks.<service>` DNS, and every series of every replica carries
    node="<the swarm node's host name>" (KILN_NODE from the stack's {{.Node.Hostname}}), as do the answers of
    the dashboard's per-node queries.
Then removes the stack, the gateway and the volumes, and leaves the swarm if it made it (unless --keep).

Exit codes: 0 passed, 1 failed, 77 skipped (no Docker daemon here, or it cannot make a swarm).
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "common"))
from stack_harness import Failure, check, compose_command, eventually, log, run, use_name  # noqa: E402

use_name("swarm-test")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STACK_FILE = os.path.join(ROOT, "docker", "kiln-stack.yml")
DASHBOARD = os.path.join(ROOT, "docker", "grafana", "dashboards", "kiln.json")
# Series Prometheus makes itself for a target (they carry only the target's labels).
SYNTHETIC = "up|scrape_.+"
COMPOSE_FILE = os.path.join(ROOT, "docker", "docker-compose.yml")
KILN_SERVICES = ["broker", "task-ingest", "llm-bridge", "compiler", "tester", "scorer", "promoter"]
STATEFUL = ["broker", "scorer", "promoter"]
COMPILERS = 3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Swarm:
    def __init__(self, args):
        self.args = args
        self.stack = args.stack
        self.broker_port, self.prom_port, self.bridge_port = free_port(), free_port(), free_port()
        self.env = dict(os.environ, KILN_BRIDGE_PORT=str(self.bridge_port),
                        KILN_GATEWAY_PORTS=f"{self.broker_port}=broker:5555 {self.prom_port}=prometheus:9090")
        self.kiln = [args.kiln, "--broker", f"tcp://127.0.0.1:{self.broker_port}"]
        self.made_swarm = False
        self.node = None
        self.labelled = False

    def docker(self, *argv, **kw):
        return run(["docker"] + list(argv), env=self.env, **kw)

    def kiln_json(self, *argv, timeout=60):
        return json.loads(run(self.kiln + ["--json"] + list(argv), timeout=timeout).stdout)

    def service(self, name):
        return json.loads(self.docker("service", "inspect", f"{self.stack}_{name}").stdout)[0]

    def prom(self, query):
        url = f"http://127.0.0.1:{self.prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise Failure(f"Prometheus refused {query!r}: {body}")
        return body["data"]["result"]

    def workers(self):
        by = {}
        for w in self.kiln_json("status")["workers"]:
            by[w["service"]] = by.get(w["service"], 0) + 1
        return by

    def join(self):
        state = self.docker("info", "--format", "{{.Swarm.LocalNodeState}}").stdout.strip()
        if state != "active":
            r = self.docker("swarm", "init", "--advertise-addr", "127.0.0.1", check_rc=False)
            if r.returncode != 0:
                return r.stdout.strip()
            self.made_swarm = True
            log("made this daemon a single-node swarm")
        else:
            log("this daemon is in a swarm already: deploying into it")
        self.node = self.docker("info", "--format", "{{.Swarm.NodeID}}").stdout.strip()
        labels = json.loads(self.docker("node", "inspect", self.node).stdout)[0]["Spec"].get("Labels") or {}
        if labels.get("kiln.state") != "true":
            self.docker("node", "update", "--label-add", "kiln.state=true", self.node)
            self.labelled = True
        return None

    def teardown(self):
        self.docker("rm", "-f", f"{self.stack}-gateway", check_rc=False)
        self.docker("stack", "rm", self.stack, check_rc=False)
        def gone():
            r = self.docker("ps", "-aq", "--filter", f"label=com.docker.stack.namespace={self.stack}", check_rc=False)
            return not r.stdout.split()
        try:
            eventually(gone, 120, 1.0, "the stack's containers to go")
        except Failure as e:
            log(f"teardown: {e}")
        for v in ("kiln-state", "kiln-registry", "kiln-gpu-claims"):
            self.docker("volume", "rm", f"{self.stack}_{v}", check_rc=False)
        if self.labelled:
            self.docker("node", "update", "--label-rm", "kiln.state", self.node, check_rc=False)
        if self.made_swarm:
            self.docker("swarm", "leave", "--force", check_rc=False)
            self.docker("network", "rm", "docker_gwbridge", check_rc=False)  # made with the swarm
            log("left the swarm")


def check_spec(sw):
    """What the stack file promises, as Swarm holds it."""
    published = {}
    for name in KILN_SERVICES + ["prometheus"]:
        spec = sw.service(name)["Spec"]
        check(spec["EndpointSpec"]["Mode"] == "dnsrr", f"{name} uses DNS round robin (no IPVS needed)")
        for p in spec["EndpointSpec"].get("Ports") or []:
            published.setdefault(name, []).append((p["TargetPort"], p.get("PublishMode")))
        constraints = spec["TaskTemplate"].get("Placement", {}).get("Constraints") or []
        if name in STATEFUL:
            check("node.labels.kiln.state == true" in constraints, f"{name} is pinned to the kiln.state node")
    check(published == {"broker": [(5557, "host")]},
          f"only the broker's CURVE bridge port is published on the node ({published})")
    for name in STATEFUL:
        ids = sw.docker("service", "ps", "-q", "--filter", "desired-state=running", f"{sw.stack}_{name}").stdout.split()
        tasks = json.loads(sw.docker("inspect", *ids).stdout)
        check(bool(tasks) and all(t.get("NodeID") == sw.node for t in tasks), f"{name} runs on the labelled node")


def check_registry(sw, promoted):
    image = os.environ.get("KILN_IMAGE", "kiln:latest")
    r = sw.docker("run", "--rm", "-v", f"{sw.stack}_kiln-registry:/r:ro", image, "cat", "/r/verified_kernels.json")
    registry = json.loads(r.stdout)
    entries = registry.get("kernels", registry if isinstance(registry, list) else [])
    found = [e for e in entries if e.get("kernel_id", e.get("id")) in promoted]
    check(len(found) == len(promoted), f"the registry volume holds the promoted kernels {sorted(promoted)}")


def campaign(sw, budget):
    sub = sw.kiln_json("submit", os.path.join(ROOT, "tests", "data", "tasks", "fast_cpu"), "--budget", str(budget))
    cid = sub["campaign_id"]
    log(f"campaign {cid} submitted from the host CLI")
    t = time.time()

    def finished():
        for c in sw.kiln_json("status")["campaigns"]:
            if c["campaign_id"] == cid and c["state"] == "done":
                return c
        return None
    info = eventually(finished, 600, 2.0, f"campaign {cid} to finish")
    log(f"campaign finished in {time.time() - t:.1f} s")
    check(info["scored"] == budget + 1, f"program 0 and {budget} proposals scored ({info['scored']})")
    ids = [p["id"] for p in sw.kiln_json("best", cid, "--top", "100")["programs"]]
    check(len(ids) == budget + 1 and len(set(ids)) == len(ids),
          f"every candidate scored exactly once ({len(ids)} rows, {len(set(ids))} distinct)")
    check(len(info["promoted"]) >= 1, f"the campaign promoted a kernel ({info['promoted']})")
    return set(info["promoted"])


def check_prometheus(sw):
    expected = {s: 1 for s in KILN_SERVICES}
    expected["compiler"] = COMPILERS

    def all_up():
        got = {}
        for r in sw.prom("up"):
            m = r["metric"]
            if m.get("job") == "kiln" and r["value"][1] == "1" and m.get("replica"):
                got.setdefault(m.get("service"), set()).add(m["replica"])
        return got if all(len(got.get(s, ())) >= n for s, n in expected.items()) else None
    got = eventually(all_up, 120, 2.0, "Prometheus to see every replica up")
    check(True, "Prometheus `up` through tasks.<service> DNS: " +
          ", ".join(f"{s}={len(v)}" for s, v in sorted(got.items())))
    check_node_labels(sw)


def check_node_labels(sw):
    """Every series of every Kiln target says the node its replica runs on: this swarm's one node."""
    host = sw.docker("node", "inspect", "self", "--format", "{{.Description.Hostname}}").stdout.strip()
    name = sw.docker("info", "--format", "{{.Name}}").stdout.strip()
    check(bool(host) and host == name, f"the swarm node's host name {host!r} is the daemon's name {name!r}")
    targets = {r["metric"]["instance"] for r in sw.prom('up{job="kiln"} == 1')}
    series = sw.prom(f'count by (instance, node) ({{job="kiln", __name__!~"{SYNTHETIC}"}})')
    nodes = {}
    for r in series:
        nodes.setdefault(r["metric"]["instance"], set()).add(r["metric"].get("node", ""))
    unlabelled = sw.prom(f'count by (instance) ({{job="kiln", node="", __name__!~"{SYNTHETIC}"}})')
    check(not unlabelled, f"no Kiln series lacks a node label ({[r['metric'] for r in unlabelled]})")
    check(bool(targets) and all(nodes.get(t) == {host} for t in targets),
          f"every series of each of the {len(targets)} targets carries node={host!r} "
          f"({ {t: sorted(nodes.get(t, ())) for t in sorted(targets)} })")
    dash = json.load(open(DASHBOARD))
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])
             if "by (node" in t.get("expr", "") and "kiln_gpu_" not in t["expr"]]  # no GPU tester here
    for expr in exprs:
        answer = eventually(lambda: sw.prom(expr), 60, 3.0, f"'{expr}' to return data")
        check(all(r["metric"].get("node") == host for r in answer),
              f"dashboard query {expr}: {len(answer)} series, each with node={host!r}")
    check(bool(exprs), f"the dashboard has per-node queries ({len(exprs)} checked)")


def build_images(sw):
    t = time.time()
    run(["bash", os.path.join(ROOT, "docker", "base-image.sh")], timeout=900, capture=False)
    if not sw.args.no_build:
        run(compose_command() + ["-f", COMPOSE_FILE, "build", "broker", "prometheus"], timeout=3600, capture=False)
    log(f"images ready in {time.time() - t:.0f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "bin", "kiln"), help="the host's kiln CLI")
    ap.add_argument("--stack", default="kilnswarmtest", help="stack name")
    ap.add_argument("--budget", type=int, default=6)
    ap.add_argument("--keep", action="store_true", help="leave the stack (and the swarm) up afterwards")
    ap.add_argument("--no-build", action="store_true", help="use the images already built")
    args = ap.parse_args()

    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        log("SKIP: no Docker daemon reachable (docker/ensure-dockerd.sh starts one as root)")
        return 77
    if not os.access(args.kiln, os.X_OK):
        log(f"FAIL: no kiln CLI at {args.kiln} (make build)")
        return 1
    run([sys.executable, os.path.join(ROOT, "docker", "swarm-stack.py"), "--check"])

    sw = Swarm(args)
    started = time.time()
    try:
        build_images(sw)
        why = sw.join()
        if why:
            log(f"SKIP: this Docker daemon cannot make a swarm: {why}")
            return 77
        t = time.time()
        sw.docker("stack", "deploy", "--resolve-image", "never", "-c", STACK_FILE, sw.stack)
        run(["bash", os.path.join(ROOT, "docker", "swarm-gateway.sh"), sw.stack], env=sw.env, timeout=900)
        by = eventually(lambda: (lambda b: b if b.get("compile", 0) >= 2 and b.get("test.cpu", 0) >= 1 else None)(
            sw.workers()), 180, 1.0, "the workers to register")
        log(f"stack up, workers registered in {time.time() - t:.1f} s: {by}")
        check_spec(sw)
        testers = [w for w in sw.kiln_json("status")["workers"] if w["service"] == "test.cpu"]
        check(all(w.get("confinement") == "confined" for w in testers),
              f"the tester confines its candidates ({[w.get('confinement') for w in testers]})")

        sw.docker("service", "scale", "--detach", f"{sw.stack}_compiler={COMPILERS}")
        by = eventually(lambda: (lambda b: b if b.get("compile", 0) == COMPILERS else None)(sw.workers()), 120, 1.0,
                        f"{COMPILERS} compilers after docker service scale")
        check(True, f"docker service scale: {by['compile']} compilers registered")

        promoted = campaign(sw, args.budget)
        check_registry(sw, promoted)
        check_prometheus(sw)
        log(f"PASS in {time.time() - started:.0f} s")
        return 0
    except (Failure, subprocess.TimeoutExpired) as e:
        log(f"FAIL: {e}")
        for name in KILN_SERVICES:
            r = sw.docker("service", "logs", "--no-trunc", "--tail", "15", f"{sw.stack}_{name}", check_rc=False,
                          timeout=60)
            print(f"---- {name}\n{r.stdout[-3000:]}")
        log(f"FAIL after {time.time() - started:.0f} s: {e}")  # again, last: what failed ends the output
        return 1
    finally:
        if not args.keep:
            sw.teardown()


if __name__ == "__main__":
    sys.exit(main())
