#!/usr/bin/env python3
"""Kiln on a three-node Docker Swarm on one machine, one worker node killed mid-campaign.

Each node is a Docker-in-Docker container (bench/cluster/node.Dockerfile: Debian's docker.io, every
capability the host has, /var/lib/docker on a volume) on a bridge network of its own. Node 1 makes the
swarm and is labelled kiln.state=true; nodes 2 and 3 join as workers. The images the host built (kiln,
kiln-prometheus, kiln-gateway) are loaded into every node, docker/kiln-stack.yml is deployed from node 1
with bench/cluster/bench.yml over it (a compiler and a tester per node, 3 s heartbeats, slow timing), and
docker/swarm-gateway.sh on node 1 forwards the broker to the host CLI. A CPU campaign is submitted from the
host; once node 3's tester holds a job, node 3 is killed whole (its dockerd and every container at once,
SIGKILL). Checked: the campaign finishes on the other nodes, every candidate scored exactly once, the
promoted kernel in the registry volume on node 1; before the campaign, that Prometheus (on node 1, through
tasks.<service> DNS) sees every replica of every node, and every series of each carries node="<the node it
runs on>" (KILN_NODE, from the stack's {{.Node.Hostname}}). Figures go to bench/cluster/swarm_nodes.json.

    python3 bench/cluster/swarm_nodes.py [--budget 12] [--keep]

Needs root, a Docker daemon, and the images (`docker-compose -f docker/docker-compose.yml build`,
`docker/swarm-gateway.sh` builds kiln-gateway; KILN_IMAGE names Kiln's image, as for the compose file).
Exit 0 when every check passed.
"""
import argparse
import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tests", "common"))
from stack_harness import Failure, eventually, log, use_name  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODES = ["kiln-node1", "kiln-node2", "kiln-node3"]
NETWORK = "kiln-nodes"
NODE_IMAGE = "kiln-swarm-node:latest"
KILN_IMAGE = os.environ.get("KILN_IMAGE", "kiln:latest")  # as in the compose and stack files
IMAGES = [KILN_IMAGE, "kiln-prometheus:latest", "kiln-gateway:latest"]
STACK = "kiln"
RESULT = os.path.join(ROOT, "bench", "cluster", "swarm_nodes.json")


def has_cap(bit):
    with open("/proc/self/status") as f:
        bnd = next(line.split()[1] for line in f if line.startswith("CapBnd:"))
    return bool(int(bnd, 16) >> bit & 1)


HAS_SYS_RESOURCE = has_cap(24)


def run(argv, timeout=600, check=True, stdin=None):
    r = subprocess.run(argv, cwd=ROOT, timeout=timeout, text=stdin is None, stdin=stdin,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = r.stdout if isinstance(r.stdout, str) else r.stdout.decode(errors="replace")
    if check and r.returncode != 0:
        raise Failure(f"{' '.join(argv)} exited {r.returncode}:\n{out[-3000:]}")
    return out


def on(node, *argv, timeout=600, check=True):
    return run(["docker", "exec", node] + list(argv), timeout=timeout, check=check)


def check(cond, msg, checks):
    checks.append({"check": msg, "ok": bool(cond)})
    if not cond:
        raise Failure(msg)
    log(f"ok: {msg}")


def start_nodes():
    run(["docker", "network", "create", NETWORK], check=False)
    for n in NODES:
        run(["docker", "rm", "-f", n], check=False)
        # What --privileged would give, less CAP_SYS_RESOURCE where the host's bounding set lacks it; its
        # own cgroup parent, so its containers' cgroups do not meet the host daemon's.
        run(["docker", "run", "-d", "--name", n, "--hostname", n, "--network", NETWORK,
             "--cap-add", "ALL"] + ([] if HAS_SYS_RESOURCE else ["--cap-drop", "SYS_RESOURCE"]) +
            ["--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
             "--security-opt", "systempaths=unconfined", "--device-cgroup-rule", "a *:* rwm",
             "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "-v", f"{n}-docker:/var/lib/docker",
             "-v", f"{ROOT}:/kiln:ro", NODE_IMAGE, "--cgroup-parent", n])
    for n in NODES:
        eventually(lambda: on(n, "docker", "info", "--format", "{{.ServerVersion}}").strip(), 90, 1.0,
                   f"dockerd in {n}")
    return {n: run(["docker", "inspect", "-f", "{{(index .NetworkSettings.Networks \"%s\").IPAddress}}" % NETWORK,
                    n]).strip() for n in NODES}


def load_images():
    ids = {img: run(["docker", "image", "inspect", "-f", "{{.Id}}", img]).strip() for img in IMAGES}
    t = time.time()
    for n in NODES:
        missing = [img for img in IMAGES
                   if on(n, "docker", "image", "inspect", "-f", "{{.Id}}", img, check=False).strip() != ids[img]]
        if not missing:
            continue
        save = subprocess.Popen(["docker", "save"] + missing, stdout=subprocess.PIPE)
        run(["docker", "exec", "-i", n, "docker", "load", "-q"], stdin=save.stdout, timeout=900)
        save.wait()
        log(f"{n}: loaded {', '.join(missing)}")
    return time.time() - t


def make_swarm(ips):
    for n in NODES:  # what a kept image store brought back from an earlier run
        on(n, "sh", "-c", "docker swarm leave --force; ids=$(docker ps -aq); [ -z \"$ids\" ] || docker rm -f $ids",
           check=False)
    on(NODES[0], "docker", "swarm", "init", "--advertise-addr", ips[NODES[0]])
    token = on(NODES[0], "docker", "swarm", "join-token", "-q", "worker").strip()
    for n in NODES[1:]:
        on(n, "docker", "swarm", "join", "--token", token, f"{ips[NODES[0]]}:2377")
    on(NODES[0], "docker", "node", "update", "--label-add", "kiln.state=true", NODES[0])
    ready = eventually(lambda: (lambda out: out if out.count("Ready") == len(NODES) else None)(
        on(NODES[0], "docker", "node", "ls", "--format", "{{.Hostname}} {{.Status}}")), 60, 1.0, "three Ready nodes")
    log("swarm: " + " / ".join(ready.split("\n")).strip())


class Kiln:
    def __init__(self, args, broker):
        self.cli = [args.kiln, "--broker", broker]

    def json(self, *argv):
        return json.loads(run(self.cli + ["--json"] + list(argv), timeout=60))


def containers_on(node):
    """Container id prefixes (a worker's hostname) of the Kiln tasks on `node`."""
    return set(c[:12] for c in on(node, "docker", "ps", "-q", "--no-trunc").split())


def prom(ip, query):
    url = f"http://{ip}:9090/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)["data"]["result"]


def overlay_homes():
    """The node each task's overlay address is on: {address: node}."""
    homes = {}
    fmt = "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}"
    for n in NODES:
        out = on(n, "sh", "-c", f"docker ps -q | xargs -r docker inspect -f '{fmt}'")
        for ip in out.split():
            homes[ip] = n
    return homes


def node_labels(ips, result, checks):
    """The node label Prometheus sees on each replica's series, against the node the replica runs on."""
    synthetic = "up|scrape_.+"
    targets = {}  # replica address -> the target's service

    def every_target_labelled():
        targets.clear()
        for r in prom(ips[NODES[0]], 'up{job="kiln"} == 1'):
            targets[r["metric"]["replica"]] = r["metric"]["service"]
        seen = {}
        for r in prom(ips[NODES[0]], f'count by (replica, node) ({{job="kiln", __name__!~"{synthetic}"}})'):
            seen.setdefault(r["metric"]["replica"], set()).add(r["metric"].get("node", ""))
        return seen if len(targets) >= 3 * len(NODES) and all(seen.get(t) for t in targets) else None
    seen = eventually(every_target_labelled, 120, 2.0, "Prometheus to scrape every replica")
    homes = overlay_homes()
    rows = [{"service": svc, "replica": rep, "runs_on": homes.get(rep, "?"), "node_labels": sorted(seen[rep])}
            for rep, svc in sorted(targets.items(), key=lambda t: (t[1], t[0]))]
    result["node_labels"] = rows
    for row in rows:
        log(f"{row['service']} {row['replica']} on {row['runs_on']}: node={row['node_labels']}")
    wrong = [row for row in rows if row["node_labels"] != [row["runs_on"]]]
    check(not wrong, f"every series of each of the {len(rows)} replicas carries node=<the node it runs on> "
          f"(wrong: {wrong})", checks)
    check({row["runs_on"] for row in rows if row["service"] == "tester"} == set(NODES),
          "Prometheus sees a tester labelled with each node", checks)


def campaign(args, kiln, ips, result, checks):
    workers = eventually(lambda: (lambda ws: ws if sum(w["service"] == "compile" for w in ws) >= 3 and
                                  sum(w["service"] == "test.cpu" for w in ws) >= 3 else None)(
        kiln.json("status")["workers"]), 240, 2.0, "3 compilers and 3 testers to register")
    node_labels(ips, result, checks)
    homes = {n: containers_on(n) for n in NODES}

    def node_of(w):
        return next((n for n, cids in homes.items() if any(c in w["worker_id"] for c in cids)), "?")
    placed = sorted(f"{w['service']}@{node_of(w)}" for w in workers if w["service"] in ("compile", "test.cpu"))
    result["workers_before"] = placed
    check(all(f"test.cpu@{n}" in placed for n in NODES), f"a tester on every node ({placed})", checks)

    t0 = time.time()
    cid = kiln.json("submit", os.path.join(ROOT, "tests", "data", "tasks", "fast_cpu"),
                    "--budget", str(args.budget))["campaign_id"]
    log(f"campaign {cid} submitted from the host CLI")

    victim = NODES[-1]

    def victim_busy():
        return [w for w in kiln.json("status")["workers"]
                if w["in_flight"] > 0 and node_of(w) == victim and w["service"] == "test.cpu"]
    held = eventually(victim_busy, 300, 0.2, f"{victim}'s tester to hold a job")
    t_kill = time.time()
    run(["docker", "kill", victim])
    log(f"killed {victim} (dockerd and all its containers) while {held[0]['worker_id']} held a job, "
        f"{t_kill - t0:.1f} s into the campaign")
    result["killed_at_s"] = round(t_kill - t0, 1)

    def dropped():  # the broker has removed the lost node's workers, and requeued what they held
        return not [w for w in kiln.json("status")["workers"] if node_of(w) == victim]
    eventually(dropped, 120, 0.2, f"the broker to drop {victim}'s workers")
    result["broker_dropped_workers_after_kill_s"] = round(time.time() - t_kill, 1)
    log(f"the broker dropped {victim}'s workers {result['broker_dropped_workers_after_kill_s']} s after the kill")

    def node_down():
        out = on(NODES[0], "docker", "node", "ls", "--format", "{{.Hostname}} {{.Status}}")
        return f"{victim} Down" in out
    eventually(node_down, 120, 1.0, f"Swarm to mark {victim} down")
    result["swarm_down_after_kill_s"] = round(time.time() - t_kill, 1)

    def finished():
        return next((c for c in kiln.json("status")["campaigns"] if c["campaign_id"] == cid and c["state"] == "done"),
                    None)
    info = eventually(finished, 900, 2.0, f"campaign {cid} to finish")
    result["campaign_s"] = round(time.time() - t0, 1)
    log(f"campaign finished in {result['campaign_s']} s")
    best = kiln.json("best", cid, "--top", "100")
    keys = ("id", "verdict", "speedup", "error")
    result["programs"] = [{k: p.get(k) for k in keys if k in p} for p in best["programs"]]
    result["campaign_info"] = info
    check(info["scored"] == args.budget + 1, f"program 0 and {args.budget} proposals scored ({info['scored']}; "
          f"not evaluated {info.get('not_evaluated')})", checks)
    ids = [p["id"] for p in best["programs"]]
    check(len(ids) == args.budget + 1 and len(set(ids)) == len(ids),
          f"every candidate scored exactly once ({len(ids)} rows, {len(set(ids))} distinct)", checks)
    check(len(info["promoted"]) >= 1, f"the campaign promoted a kernel ({info['promoted']})", checks)
    requeues = eventually(lambda: prom(ips[NODES[0]], "sum by (service, reason) (kiln_jobs_requeued_total)"), 60, 2.0,
                          "Prometheus to count the requeues")
    result["requeued"] = {f"{r['metric'].get('service')}/{r['metric'].get('reason')}": float(r["value"][1])
                          for r in requeues}
    reg = json.loads(on(NODES[0], "docker", "run", "--rm", "-v", f"{STACK}_kiln-registry:/r:ro", KILN_IMAGE,
                        "cat", "/r/verified_kernels.json"))
    entries = reg.get("kernels", reg if isinstance(reg, list) else [])
    found = [e for e in entries if e.get("kernel_id", e.get("id")) in set(info["promoted"])]
    check(len(found) == len(info["promoted"]), "the registry volume on node 1 holds the promoted kernels", checks)
    result["campaign"] = {"id": cid, "budget": args.budget, "scored": info["scored"], "promoted": info["promoted"]}
    after = kiln.json("status")["workers"]
    check(any(k.startswith("test.cpu/") for k in result["requeued"]), f"the lost tester's job was requeued "
          f"({result['requeued']})", checks)
    result["workers_after"] = sorted(f"{w['service']}@{node_of(w)}" for w in after
                                     if w["service"] in ("compile", "test.cpu"))


def teardown(keep_volumes):
    for n in NODES:
        run(["docker", "rm", "-f", n], check=False)
        if not keep_volumes:
            run(["docker", "volume", "rm", f"{n}-docker"], check=False)
    run(["docker", "network", "rm", NETWORK], check=False)


def main():
    use_name("swarm-nodes")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "bin", "kiln"))
    ap.add_argument("--budget", type=int, default=12)
    ap.add_argument("--keep", action="store_true", help="leave the nodes running")
    ap.add_argument("--keep-volumes", action="store_true", help="keep the nodes' image stores for a rerun")
    args = ap.parse_args()
    result = {"nodes": len(NODES), "checks": [], "host": {"cpus": os.cpu_count()}}
    started = time.time()
    rc = 1
    try:
        for img in IMAGES + [NODE_IMAGE]:
            run(["docker", "image", "inspect", img])
        ips = start_nodes()
        result["image_load_s"] = round(load_images(), 1)
        make_swarm(ips)
        t = time.time()
        on(NODES[0], "sh", "-c", f"cd /kiln && KILN_IMAGE={KILN_IMAGE} docker stack deploy --resolve-image never "
                                 f"-c docker/kiln-stack.yml -c bench/cluster/bench.yml {STACK}")
        on(NODES[0], "env", "KILN_GATEWAY_ADDR=0.0.0.0", "KILN_GATEWAY_PORTS=5555=broker:5555 9090=prometheus:9090",
           "bash", "/kiln/docker/swarm-gateway.sh", STACK)
        kiln = Kiln(args, f"tcp://{ips[NODES[0]]}:5555")
        campaign(args, kiln, ips, result, result["checks"])
        result["deploy_to_done_s"] = round(time.time() - t, 1)
        rc = 0
        log("PASS")
    except (Failure, subprocess.TimeoutExpired) as e:
        log(f"FAIL: {e}")
        result["failure"] = str(e)[-2000:]
        for svc in ("broker", "tester", "compiler", "scorer"):
            print(on(NODES[0], "docker", "service", "logs", "--tail", "10", f"{STACK}_{svc}", check=False)[-2500:])
    finally:
        result["passed"] = rc == 0
        result["total_s"] = round(time.time() - started, 1)
        with open(RESULT, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        log(f"result: {os.path.relpath(RESULT, ROOT)}")
        if not args.keep:
            teardown(args.keep_volumes)
    return rc


if __name__ == "__main__":
    sys.exit(main())
