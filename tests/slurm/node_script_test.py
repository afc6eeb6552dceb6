#!/usr/bin/env python3
"""deploy/slurm/kiln-slurm without Slurm: what its `node` mode starts on a node, and how `submit` refuses
bad input. The workers are stand-ins that record their arguments and environment, so the GPU placement
(one tester per entry of CUDA_VISIBLE_DEVICES, each seeing only its own) is checked on a machine without a
GPU; tests/slurm/slurm_test.py runs the real workers under a real Slurm.

Exit codes: 0 passed, 1 failed. The last line counts the checks made (KILN-CHECKED).
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILN_SLURM = os.path.join(ROOT, "deploy", "slurm", "kiln-slurm")

# A worker stand-in: one JSON line per start (argv, the environment the script sets), then it waits for
# SIGTERM and records that it stopped. A compiler whose "crash-once" marker is absent exits 3 at once, once.
STUB = r"""#!/usr/bin/env python3
import json, os, signal, sys, time
rec = os.environ["STUB_RECORD"]
name = os.path.basename(sys.argv[0])
def stop(*_):
    with open(rec, "a") as f:
        f.write(json.dumps({"stopped": os.getpid()}) + "\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)  # before the start is recorded: the test signals once it reads it
with open(rec, "a") as f:
    f.write(json.dumps({"exe": name, "argv": sys.argv[1:], "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
                        "backend": os.environ.get("KILN_TESTER_BACKEND"), "node": os.environ.get("KILN_NODE"),
                        "pid": os.getpid()}) + "\n")
marker = os.path.join(os.path.dirname(rec), "crashed-once")
if name == "kiln-compiler" and os.environ.get("STUB_CRASH_ONCE") and not os.path.exists(marker):
    open(marker, "w").close()
    sys.exit(3)
while True:
    time.sleep(1)
"""

failures = []
checks = 0


def check(cond, msg):
    global checks
    checks += 1
    print(("ok: " if cond else "FAIL: ") + msg, flush=True)
    if not cond:
        failures.append(msg)


def records(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def wait_for(pred, timeout=30):
    until = time.time() + timeout
    while time.time() < until:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def run_node(tmp, env_extra, expect_starts):
    bindir = os.path.join(tmp, "bin")
    rec = os.path.join(tmp, "record.jsonl")
    env = dict(os.environ, KILN_SLURM_BIN=bindir, KILN_SLURM_BROKER="tcp://10.0.0.1:5555",
               KILN_SLURM_LOG_DIR=os.path.join(tmp, "logs"), SLURM_JOB_ID="42", STUB_RECORD=rec, TMPDIR=tmp)
    for inherited in ("CUDA_VISIBLE_DEVICES", "KILN_NODE", "SLURMD_NODENAME"):
        env.pop(inherited, None)
    env.update(env_extra)
    os.makedirs(env["KILN_SLURM_LOG_DIR"], exist_ok=True)
    node = subprocess.Popen([KILN_SLURM, "node"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    started = wait_for(lambda: len([r for r in records(rec) if "exe" in r]) >= expect_starts)
    check(started, f"the node started {expect_starts} worker processes")
    node.send_signal(signal.SIGTERM)
    out, _ = node.communicate(timeout=30)
    return node.returncode, out, records(rec)


def test_gpu_node(tmp):
    rc, out, recs = run_node(tmp, {"CUDA_VISIBLE_DEVICES": "3,GPU-1a2b", "SLURM_CPUS_ON_NODE": "8",
                                   "SLURMD_NODENAME": "gpu-node-7"}, 5)
    starts = [r for r in recs if "exe" in r]
    check(all(r["node"] == "gpu-node-7" for r in starts),
          f"every worker knows its Slurm node name as KILN_NODE ({sorted({r['node'] for r in starts})})")
    testers = sorted((r["cuda"], r["backend"]) for r in starts if r["exe"] == "kiln-tester")
    check(testers == [("3", "cuda"), ("GPU-1a2b", "cuda")],
          f"one CUDA tester per allocated GPU, each seeing only its own ({testers})")
    compilers = [r for r in starts if r["exe"] == "kiln-compiler"]
    check(len(compilers) == 3, f"(8 CPUs - 2 testers) / 2 = 3 compilers ({len(compilers)})")
    for r in starts:
        argv = r["argv"]
        check(argv[argv.index("--broker") + 1] == "tcp://10.0.0.1:5555" and "--metrics-port" in argv
              and argv[argv.index("--metrics-port") + 1] == "0",
              f"{r['exe']} connects with --broker and serves /metrics on a free port")
    stopped = {r["stopped"] for r in recs if "stopped" in r}
    check(stopped == {r["pid"] for r in starts}, "SIGTERM to the node reached every worker, and each stopped")
    check(rc == 0 and "every worker stopped" in out, f"the node script waited for them and exited 0 (rc {rc})")
    check(not [d for d in os.listdir(tmp) if d.startswith("kiln-slurm-42-")],
          "the node's worker state folder is removed")


def test_cpu_node_restarts(tmp):
    env = {"KILN_SLURM_CPU_TESTERS": "2", "KILN_SLURM_COMPILERS": "1", "STUB_CRASH_ONCE": "1",
           "CUDA_VISIBLE_DEVICES": "NoDevFiles"}
    rc, out, recs = run_node(tmp, env, 4)  # the compiler twice: it exits once and is started again
    starts = [r for r in recs if "exe" in r]
    host = subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()
    check(all(r["node"] == host for r in starts), f"outside Slurm, KILN_NODE is the host's short name ({host})")
    testers = [r["backend"] for r in starts if r["exe"] == "kiln-tester"]
    check(testers == ["cpu", "cpu"] and all(r["cuda"] == "NoDevFiles" for r in starts if r["exe"] == "kiln-tester"),
          f"without a GPU: the CPU testers asked for ({testers})")
    check(len([r for r in starts if r["exe"] == "kiln-compiler"]) == 2, "a compiler that exited was started again")
    check("compiler-1 exited (status 3)" in out, "the node script says which worker exited and how")
    check(rc == 0, f"the node script exited 0 after SIGTERM (rc {rc})")


def test_submit_refusals(tmp):
    def submit(*argv):
        r = subprocess.run([KILN_SLURM, "submit", *argv], capture_output=True, text=True)
        return r.returncode, r.stderr.strip()
    rc, err = submit("--gres=gpu:4")
    check(rc == 2 and "--broker tcp://HOST:PORT is required" in err, f"no --broker: {err!r}")
    rc, err = submit("--broker", "10.0.0.1:5555")
    check(rc == 2 and "expected tcp://HOST:PORT, got '10.0.0.1:5555'" in err, f"a bad broker address: {err!r}")
    rc, err = submit("--broker", "tcp://10.0.0.1:5555", "--bin", tmp + "/nowhere")
    check(rc == 2 and "no kiln-compiler in" in err, f"binaries missing: {err!r}")
    rc, err = submit("--broker", "tcp://10.0.0.1:5555", "--bin", os.path.join(tmp, "bin"), "--compilers", "many")
    check(rc == 2 and "--compilers: expected a count, got 'many'" in err, f"a bad count: {err!r}")


def main():
    with tempfile.TemporaryDirectory(prefix="kiln-slurm-node-") as tmp:
        bindir = os.path.join(tmp, "bin")
        os.makedirs(bindir)
        for exe in ("kiln-compiler", "kiln-tester", "kiln-eval"):
            path = os.path.join(bindir, exe)
            with open(path, "w") as f:
                f.write(STUB)
            os.chmod(path, 0o755)
        for test in (test_gpu_node, test_cpu_node_restarts, test_submit_refusals):
            sub = os.path.join(tmp, test.__name__)
            os.makedirs(sub)
            os.symlink(bindir, os.path.join(sub, "bin"))
            test(sub)
    print("PASS" if not failures else f"FAILED: {len(failures)} check(s)")
    print(f"KILN-CHECKED {checks} checks")  # what tests/tools/ctest_summary.py counts
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
