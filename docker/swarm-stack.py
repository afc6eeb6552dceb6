#!/usr/bin/env python3
"""Writes the Docker Swarm stack file docker/kiln-stack.yml and Prometheus's Swarm scrape configuration
docker/prometheus/swarm.yml from docker/docker-compose.yml and docker/prometheus/prometheus.yml.

    docker/swarm-stack.py            # rewrite both files
    docker/swarm-stack.py --check    # exit 1 if either differs from what it would write (ctest swarm_stack)

`docker stack deploy` cannot take the compose file itself: it refuses the GPU tester's device reservation,
and ignores build, restart, depends_on, profiles and security_opt. The services, images, commands,
environment, users, capabilities and volumes come from the compose file unchanged; what Swarm needs besides
(placement, replicas, DNS round robin, the overlay network, published ports, restart policy, configs) comes
from the SWARM table below. A service in the compose file and not in the table is an error, so the two files
cannot drift apart unnoticed.
"""
import argparse
import copy
import os
import re
import sys

import yaml

DOCKER = os.path.dirname(os.path.abspath(__file__))
COMPOSE = os.path.join(DOCKER, "docker-compose.yml")
PROM_COMPOSE = os.path.join(DOCKER, "prometheus", "prometheus.yml")
STACK = os.path.join(DOCKER, "kiln-stack.yml")
PROM_SWARM = os.path.join(DOCKER, "prometheus", "swarm.yml")

NETWORK = "kiln"
STATE_NODE = ["node.labels.kiln.state == true"]
GPU_NODE = ["node.labels.kiln.gpu == true"]
SPREAD = [{"spread": "node.id"}]

# Per service: replicas, placement constraints and preferences, ports published on the node (host mode:
# without IPVS there is no routing mesh), generic resources reserved, and Swarm configs mounted as files.
SWARM = {
    "broker": {"replicas": 1, "constraints": STATE_NODE,
               # Only the CURVE bridge port leaves the overlay network.
               "ports": [{"target": 5557, "published": "${KILN_BRIDGE_PORT:-5557}", "mode": "host"}]},
    "task-ingest": {"replicas": 1},
    "llm-bridge": {"replicas": 1},
    "compiler": {"replicas": 2, "preferences": SPREAD},
    "tester": {"replicas": 1, "preferences": SPREAD},
    "scorer": {"replicas": 1, "constraints": STATE_NODE},
    "promoter": {"replicas": 1, "constraints": STATE_NODE},
    "compiler-cuda": {"replicas": 0, "preferences": SPREAD},
    "tester-gpu": {"replicas": 0, "constraints": GPU_NODE, "preferences": SPREAD, "gpus": 1},
    # Its series live in the container: kept on the state node, where a lost worker node cannot take them.
    "prometheus": {"replicas": 1, "constraints": STATE_NODE,
                   "configs": {"prometheus": "/etc/prometheus/prometheus.yml"}},
    "grafana": {"replicas": 0, "configs": {
        "grafana-datasource": "/etc/grafana/provisioning/datasources/prometheus.yml",
        "grafana-dashboards": "/etc/grafana/provisioning/dashboards/kiln.yml",
        "grafana-dashboard-kiln": "/var/lib/grafana/dashboards/kiln.json"}},
}
CONFIG_FILES = {
    "prometheus": "./prometheus/swarm.yml",
    "grafana-datasource": "./grafana/provisioning/datasources/prometheus.yml",
    "grafana-dashboards": "./grafana/provisioning/dashboards/kiln.yml",
    "grafana-dashboard-kiln": "./grafana/dashboards/kiln.json",
}
# Compose keys Swarm ignores or refuses, replaced by deploy settings or configs (or, for security_opt, by
# nothing: see docs/cluster.md).
NODE_ENV, NODE_TEMPLATE = "KILN_NODE", "{{.Node.Hostname}}"
DROPPED = {"build", "restart", "depends_on", "profiles", "security_opt", "deploy", "ports"}
KEPT = {"image", "command", "environment", "volumes", "user", "read_only", "init", "cap_add", "cap_drop", "tmpfs"}

STACK_HEADER = """\
# Kiln on Docker Swarm. Written by docker/swarm-stack.py from docker-compose.yml: edit those, not this file
# (ctest -R swarm_stack fails while they disagree). Steps and caveats: docs/cluster.md.
#   docker node update --label-add kiln.state=true <node>    # broker, scorer, promoter, Prometheus, volumes
#   docker stack deploy --resolve-image never -c docker/kiln-stack.yml kiln
#   docker/swarm-gateway.sh                                  # broker, Prometheus, reports on this host's loopback
#   docker service scale kiln_compiler=6
# GPU nodes (NVIDIA runtime as dockerd's default, GPUs advertised as NVIDIA-GPU generic resources):
#   docker node update --label-add kiln.gpu=true <node>; docker service scale kiln_tester-gpu=<GPUs in all>
# Every service is on the overlay network `kiln` with DNS round robin (no virtual IP, no IPVS needed); only
# the CURVE bridge port 5557 is published on a node. Each Kiln process gets KILN_NODE, its node's host name
# (a Swarm template): Prometheus sees node="<host>" on every series of it.
"""
PROM_HEADER = """\
# Prometheus on Docker Swarm: every replica of every Kiln service on every node, found through Swarm's
# `tasks.<service>` DNS names. Written by docker/swarm-stack.py from prometheus.yml (edit that one).
# Each target gets `service` (the stack's service) and `replica` (its overlay address) labels; honor_labels
# keeps a metric's own `service` label (the broker's queue metrics name the queue: compile, test.cpu...).
"""


class Error(Exception):
    pass


def with_node(env):
    """A Kiln process's environment plus KILN_NODE, the node's host name as Swarm fills it in: every series
    on its /metrics then carries node="<host>" (docs/cluster.md)."""
    if isinstance(env, list):
        env = dict(e.split("=", 1) if "=" in e else (e, None) for e in env)
    env = dict(env or {})
    if NODE_ENV in env:
        raise Error(f"{NODE_ENV} is set by docker/swarm-stack.py, not in docker-compose.yml")
    env[NODE_ENV] = NODE_TEMPLATE
    return env


def swarm_service(name, svc, spec):
    out = {k: copy.deepcopy(v) for k, v in svc.items() if k in KEPT}
    unknown = set(svc) - KEPT - DROPPED
    if unknown:
        raise Error(f"service {name}: keys {sorted(unknown)} are neither carried to Swarm nor dropped "
                    f"(docker/swarm-stack.py KEPT/DROPPED)")
    if str((svc.get("command") or [""])[0]).startswith("kiln-"):
        out["environment"] = with_node(out.get("environment"))
    if name == "grafana":
        out.pop("volumes", None)  # bind mounts of the checkout: Swarm configs instead
    if "tmpfs" in out:
        # Swarm ignores `tmpfs`, and its tmpfs mounts are noexec (a candidate's shared object is loaded from
        # scratch): an anonymous volume per container instead, removed with the task's container.
        out["volumes"] = out.get("volumes", []) + [t.split(":")[0] for t in out.pop("tmpfs")]
    deploy = {"mode": "replicated", "replicas": spec["replicas"], "endpoint_mode": "dnsrr",
              "restart_policy": {"condition": "any", "delay": "1s"}}
    placement = {}
    if spec.get("constraints"):
        placement["constraints"] = list(spec["constraints"])
    if spec.get("preferences"):
        placement["preferences"] = copy.deepcopy(spec["preferences"])
    if placement:
        deploy["placement"] = placement
    if spec.get("gpus"):
        deploy["resources"] = {"reservations": {"generic_resources": [
            {"discrete_resource_spec": {"kind": "NVIDIA-GPU", "value": spec["gpus"]}}]}}
    out["deploy"] = deploy
    out["networks"] = [NETWORK]
    if spec.get("ports"):
        out["ports"] = [dict(p, protocol="tcp") for p in spec["ports"]]
    if spec.get("configs"):
        out["configs"] = [{"source": src, "target": tgt} for src, tgt in spec["configs"].items()]
    return out


def stack(compose):
    services = compose.get("services") or {}
    missing = sorted(set(services) - set(SWARM))
    extra = sorted(set(SWARM) - set(services))
    if missing or extra:
        raise Error(f"docker-compose.yml and docker/swarm-stack.py's SWARM table disagree: only in compose "
                    f"{missing}, only in SWARM {extra}")
    out = {"version": "3.8",
           "services": {n: swarm_service(n, services[n], SWARM[n]) for n in services},
           "networks": {NETWORK: {"driver": "overlay", "attachable": True}},
           "volumes": {v: {} for v in (compose.get("volumes") or {})},
           "configs": {n: {"file": f} for n, f in CONFIG_FILES.items()}}
    for name, path in CONFIG_FILES.items():
        if name != "prometheus" and not os.path.exists(os.path.join(DOCKER, path)):  # that one is written here
            raise Error(f"config {name}: no file {path} beside docker-compose.yml")
    return out


def prometheus_swarm(prom):
    out = copy.deepcopy(prom)
    for job in out.get("scrape_configs", []):
        for sd in job.get("dns_sd_configs", []):
            sd["names"] = ["tasks." + n for n in sd["names"]]
        for rule in job.get("relabel_configs", []):
            if rule.get("source_labels") == ["__meta_dns_name"] and rule.get("target_label") == "service":
                rule["regex"] = "tasks\\.(.+)"
    return out


def dump(header, data):
    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, _data):
            return True
    return header + yaml.dump(data, Dumper=Dumper, sort_keys=False, default_flow_style=None, width=118)


def render():
    with open(COMPOSE) as f:
        compose = yaml.safe_load(f)
    with open(PROM_COMPOSE) as f:
        prom = yaml.safe_load(f)
    return {STACK: dump(STACK_HEADER, stack(compose)), PROM_SWARM: dump(PROM_HEADER, prometheus_swarm(prom))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    args = ap.parse_args()
    try:
        files = render()
    except (Error, OSError, yaml.YAMLError) as e:
        print(f"swarm-stack: {e}", file=sys.stderr)
        return 2
    stale = []
    for path, text in files.items():
        old = open(path).read() if os.path.exists(path) else None
        if old == text:
            continue
        if args.check:
            stale.append(os.path.relpath(path, os.path.dirname(DOCKER)))
        else:
            with open(path, "w") as f:
                f.write(text)
            print(f"swarm-stack: wrote {os.path.relpath(path, os.path.dirname(DOCKER))}")
    if stale:
        print(f"swarm-stack: {', '.join(stale)} out of step with docker-compose.yml: run docker/swarm-stack.py",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
