#!/usr/bin/env python3
"""docker/kiln-stack.yml without Docker (ctest swarm_stack): it is what docker/swarm-stack.py writes from
docker-compose.yml today, it keeps the promises docs/cluster.md makes, and the generator refuses a compose
service it has no Swarm settings for."""
import copy
import os
import subprocess
import sys
import unittest

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "docker"))
swarm_stack = __import__("swarm-stack")

STATEFUL = {"broker", "scorer", "promoter", "prometheus"}


def load(path):
    with open(os.path.join(ROOT, path)) as f:
        return yaml.safe_load(f)


class SwarmStack(unittest.TestCase):
    def test_in_step_with_the_compose_file(self):
        r = subprocess.run([sys.executable, os.path.join(ROOT, "docker", "swarm-stack.py"), "--check"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_every_service_round_robin_and_restarted(self):
        for name, svc in load("docker/kiln-stack.yml")["services"].items():
            self.assertEqual(svc["deploy"]["endpoint_mode"], "dnsrr", name)
            self.assertEqual(svc["deploy"]["restart_policy"]["condition"], "any", name)
            self.assertEqual(svc["networks"], ["kiln"], name)
            self.assertFalse({"build", "restart", "depends_on", "profiles"} & set(svc), name)

    def test_only_the_bridge_port_is_published(self):
        published = {n: [p["target"] for p in s.get("ports", [])]
                     for n, s in load("docker/kiln-stack.yml")["services"].items() if s.get("ports")}
        self.assertEqual(published, {"broker": [5557]})
        self.assertTrue(all(p["mode"] == "host" for p in load("docker/kiln-stack.yml")["services"]["broker"]["ports"]))

    def test_state_pinned_and_gpu_testers_on_gpu_nodes(self):
        services = load("docker/kiln-stack.yml")["services"]
        for name, svc in services.items():
            constraints = svc["deploy"].get("placement", {}).get("constraints", [])
            self.assertEqual("node.labels.kiln.state == true" in constraints, name in STATEFUL, name)
            if any(v.startswith(("kiln-state:", "kiln-registry:")) for v in svc.get("volumes", [])):
                self.assertIn(name, STATEFUL)
        gpu = services["tester-gpu"]["deploy"]
        self.assertIn("node.labels.kiln.gpu == true", gpu["placement"]["constraints"])
        self.assertEqual(gpu["resources"]["reservations"]["generic_resources"],
                         [{"discrete_resource_spec": {"kind": "NVIDIA-GPU", "value": 1}}])

    def test_tester_scratch_is_executable(self):
        # Swarm drops `tmpfs` and mounts its tmpfs noexec: the tester's scratch must be a volume there.
        tester = load("docker/kiln-stack.yml")["services"]["tester"]
        self.assertNotIn("tmpfs", tester)
        self.assertTrue(tester["read_only"])
        self.assertIn("/var/lib/kiln/work", tester["volumes"])

    def test_prometheus_asks_for_every_task(self):
        names = [n for sd in load("docker/prometheus/swarm.yml")["scrape_configs"][0]["dns_sd_configs"]
                 for n in sd["names"]]
        self.assertTrue(names and all(n.startswith("tasks.") for n in names), names)

    def test_every_kiln_process_knows_its_node(self):
        # KILN_NODE puts node="<host>" on every series the process exposes (docs/cluster.md).
        for name, svc in load("docker/kiln-stack.yml")["services"].items():
            env = svc.get("environment") or {}
            if svc.get("command", [""])[0].startswith("kiln-"):
                self.assertEqual(env.get("KILN_NODE"), "{{.Node.Hostname}}", name)
            else:
                self.assertNotIn("KILN_NODE", env, name)
        compose = load("docker/docker-compose.yml")
        kept = swarm_stack.stack(compose)["services"]["llm-bridge"]["environment"]
        self.assertEqual(set(kept), {"OPENAI_API_KEY", "KILN_NODE"})  # the service's own variables kept
        listed = copy.deepcopy(compose)
        listed["services"]["compiler"]["environment"] = ["A=1", "B"]
        self.assertEqual(swarm_stack.stack(listed)["services"]["compiler"]["environment"],
                         {"A": "1", "B": None, "KILN_NODE": "{{.Node.Hostname}}"})
        clash = copy.deepcopy(compose)
        clash["services"]["compiler"]["environment"] = {"KILN_NODE": "x"}
        with self.assertRaisesRegex(swarm_stack.Error, r"KILN_NODE is set by docker/swarm-stack.py"):
            swarm_stack.stack(clash)

    def test_unknown_compose_service_is_refused(self):
        compose = load("docker/docker-compose.yml")
        extra = copy.deepcopy(compose)
        extra["services"]["cache"] = {"image": "redis"}
        with self.assertRaisesRegex(swarm_stack.Error, r"only in compose \['cache'\]"):
            swarm_stack.stack(extra)
        odd = copy.deepcopy(compose)
        odd["services"]["compiler"]["privileged"] = True
        with self.assertRaisesRegex(swarm_stack.Error, r"compiler: keys \['privileged'\]"):
            swarm_stack.stack(odd)


if __name__ == "__main__":
    unittest.main()
