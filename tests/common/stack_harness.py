# What the whole-stack tests (compose, swarm, slurm; bench/cluster/swarm_nodes.py) share: a log line
# prefixed with the test's name, checks that raise Failure, commands run from the checkout, waiting for a
# condition, and the Compose command this machine has. Test-only.
import os
import shutil
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_name = "stack-test"


class Failure(Exception):
    pass


def use_name(name):
    """The prefix of every log line ("compose-test", "swarm-test")."""
    global _name
    _name = name


def log(msg):
    print(f"[{_name} {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def check(cond, msg):
    if not cond:
        raise Failure(msg)
    log(f"ok: {msg}")


def run(argv, timeout=600, check_rc=True, env=None, capture=True):
    r = subprocess.run(argv, cwd=ROOT, timeout=timeout, text=True, env=env,
                       stdout=subprocess.PIPE if capture else None, stderr=subprocess.STDOUT if capture else None)
    if check_rc and r.returncode != 0:
        raise Failure(f"{' '.join(argv)} exited {r.returncode}:\n{(r.stdout or '')[-4000:]}")
    return r


def eventually(fn, timeout, interval=1.0, what="condition"):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = fn()
            if last:
                return last
        except Exception as e:  # a service still starting: keep asking until the deadline
            last = e
        time.sleep(interval)
    raise Failure(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def compose_command():
    """`docker compose` (v2) where the plugin exists, else `docker-compose` (1.29): it builds the images."""
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise Failure("neither `docker compose` nor `docker-compose` is installed")
