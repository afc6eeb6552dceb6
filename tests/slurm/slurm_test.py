#!/usr/bin/env python3
"""Kiln's workers as a Slurm job (`make slurm-test`), on a real Slurm of one node started here.

Starts munged, slurmctld and slurmd with their own state under a temporary folder (no systemd needed), and
on the host `kiln up` with no compilers or testers of its own (broker, task-ingest, llm-bridge, scorer,
promoter). Then:
  1. deploy/slurm/kiln-slurm submits the workers (a compiler and a CPU tester) as a Slurm job, as the user
     'nobody' where that user may create the namespaces a tester confines candidates with (a cluster user's
     case: a user namespace), else as root (the log says why); a CPU campaign submitted from the host CLI
     finishes, every candidate scored once;
  2. a second campaign: the job is cancelled with `scancel` while its workers hold jobs; the workers stop
     cleanly (each logs that it stopped), their jobs go back to the queue, no candidate is judged on a
     kill; the job is submitted again and the campaign finishes, every candidate scored once;
  3. a third: every process of the job is stopped at once (SIGSTOP: a node that hangs or is cut off, its
     connections open), then killed; the broker notices the silent workers by their missed heartbeats and
     requeues their jobs (worker_lost); the job is submitted again and the campaign finishes, every
     candidate scored once.
Everything it started is stopped afterwards.

Exit codes: 0 passed, 1 failed, 77 skipped (no Slurm or munge here, not root, or the daemons cannot start;
the reason is printed).
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "common"))
from stack_harness import Failure, check, eventually, log, use_name  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILN_SLURM = os.path.join(ROOT, "deploy", "slurm", "kiln-slurm")
TASK = os.path.join(ROOT, "tests", "data", "tasks", "fast_cpu")
NEEDED = ["munged", "mungekey", "munge", "unmunge", "slurmctld", "slurmd", "slurmstepd", "sbatch", "srun",
          "scancel", "squeue", "sinfo", "scontrol", "setpriv", "unshare"]
JOB_SERVICES = ("compile", "test.cpu")  # what the Slurm job's workers serve


class Skip(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path, n=30):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError as e:
        return f"({path}: {e})"


def stop_process(p, grace=15):
    if p is None or p.poll() is not None:
        return
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(grace)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


class Cluster:
    """munged + slurmctld + slurmd for one node (this host), everything under `tmp`."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.host = socket.gethostname().split(".")[0]
        self.conf = os.path.join(tmp, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        self.procs = {}

    def path(self, *p):
        return os.path.join(self.tmp, *p)

    def start_munge(self):
        os.makedirs(self.path("munge"), mode=0o755)
        key = self.path("munge", "munge.key")
        r = subprocess.run(["mungekey", "--create", f"--keyfile={key}"], capture_output=True, text=True)
        if r.returncode != 0:
            raise Skip(f"mungekey cannot create a key: {r.stderr.strip()}")
        sock = self.path("munge", "munge.socket")
        self.procs["munged"] = subprocess.Popen(
            ["munged", "--foreground", "--force", f"--socket={sock}", f"--key-file={key}",
             f"--pid-file={self.path('munge', 'munged.pid')}", f"--seed-file={self.path('munge', 'munged.seed')}",
             f"--log-file={self.path('munge', 'munged.log')}"],
            stdout=open(self.path("munged.out"), "w"), stderr=subprocess.STDOUT)

        def works():
            if self.procs["munged"].poll() is not None:
                raise Skip(f"munged exited with {self.procs['munged'].returncode}:\n{tail(self.path('munged.out'))}")
            cred = subprocess.run(["munge", "-n", "-S", sock], capture_output=True)
            return cred.returncode == 0 and subprocess.run(["unmunge", "-S", sock], input=cred.stdout,
                                                           capture_output=True).returncode == 0
        try:
            eventually(works, 20, 0.2, "munged to answer")
        except Failure as e:
            raise Skip(f"munged does not answer: {e}\n{tail(self.path('munged.out'))}")
        self.munge_socket = sock

    def write_conf(self):
        for d in ("ctld", "spool"):
            os.makedirs(self.path(d))
        ctld_port, d_port = free_port(), free_port()
        # No cgroup, no systemd: processes are tracked by parentage and tasks are not bound.
        conf = f"""ClusterName=kilntest
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
StateSaveLocation={self.path('ctld')}
SlurmdSpoolDir={self.path('spool')}
SlurmctldPidFile={self.path('slurmctld.pid')}
SlurmdPidFile={self.path('slurmd.pid')}
SlurmctldLogFile={self.path('slurmctld.log')}
SlurmdLogFile={self.path('slurmd.log')}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
KillWait=30
NodeName={self.host} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=kiln Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
"""
        with open(self.conf, "w") as f:
            f.write(conf)

    def start_slurm(self):
        self.write_conf()
        self.procs["slurmctld"] = subprocess.Popen(["slurmctld", "-D", "-i", "-f", self.conf], env=self.env,
                                                   stdout=open(self.path("slurmctld.out"), "w"),
                                                   stderr=subprocess.STDOUT)
        self.procs["slurmd"] = subprocess.Popen(["slurmd", "-D", "-N", self.host, "-f", self.conf], env=self.env,
                                                stdout=open(self.path("slurmd.out"), "w"), stderr=subprocess.STDOUT)

        def idle():
            for name in ("slurmctld", "slurmd"):
                if self.procs[name].poll() is not None:
                    raise Skip(f"{name} exited with {self.procs[name].returncode}:\n"
                               f"{tail(self.path(name + '.out'))}{tail(self.path(name + '.log'))}")
            r = self.slurm(["sinfo", "-h", "-N", "-o", "%T"], check_rc=False)
            return r.returncode == 0 and r.stdout.strip() == "idle"
        try:
            eventually(idle, 60, 0.5, "the Slurm node to be idle")
        except Failure as e:
            raise Skip(f"slurmctld/slurmd did not bring the node up: {e}\n{tail(self.path('slurmctld.log'))}"
                       f"{tail(self.path('slurmd.log'))}")

    def slurm(self, argv, check_rc=True, timeout=60):
        r = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check_rc and r.returncode != 0:
            raise Failure(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.strip()}")
        return r

    def signal_job_processes(self, job, sig, pids=None):
        """`sig` to every process of `job` on this node (scontrol listpids), or to `pids`. (`scancel
        --signal=KILL` would be a plain cancel, SIGTERM first.)"""
        if pids is None:
            out = self.slurm(["scontrol", "listpids", job]).stdout.splitlines()
            pids = [int(line.split()[0]) for line in out[1:] if line.split() and line.split()[0].isdigit()]
            check(bool(pids), f"scontrol listpids {job} lists the job's processes")
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        return pids

    def job_state(self, job):
        r = self.slurm(["squeue", "-h", "-j", job, "-o", "%T"], check_rc=False)
        return r.stdout.strip() if r.returncode == 0 else ""

    def stop(self):
        if "slurmctld" in self.procs:
            ids = self.slurm(["squeue", "-h", "-o", "%i"], check_rc=False).stdout.split()
            if ids:
                self.slurm(["scancel", "--full", *ids], check_rc=False)
            try:
                eventually(lambda: self.slurm(["squeue", "-h"], check_rc=False).stdout.strip() == "", 60, 1,
                           "every job to end")
            except Failure as e:
                log(f"warning: {e}")
        for name in ("slurmd", "slurmctld", "munged"):
            stop_process(self.procs.get(name))


class Kiln:
    """`kiln up` on the host with no workers of its own, and the host CLI against its broker."""

    def __init__(self, args, tmp):
        self.args = args
        self.tmp = tmp
        self.port = free_port()
        self.metrics_port = free_port()
        self.broker = f"tcp://127.0.0.1:{self.port}"
        self.proc = None

    def start(self):
        env = dict(os.environ, KILN_UP_COMPILERS="0", KILN_UP_TESTERS="0", KILN_BROKER_BIND=self.broker,
                   KILN_BROKER_EVENTS_BIND=f"tcp://127.0.0.1:{free_port()}",
                   KILN_BROKER_METRICS_PORT=str(self.metrics_port), KILN_INGEST_METRICS_PORT="0",
                   KILN_LLM_BRIDGE_METRICS_PORT="0", KILN_SCORER_METRICS_PORT="0", KILN_PROMOTER_METRICS_PORT="0",
                   KILN_PROMOTER_REGISTRY_DIR=os.path.join(self.tmp, "registry"))
        self.proc = subprocess.Popen([self.args.kiln, "up", "--state-dir", os.path.join(self.tmp, "kiln")], env=env,
                                     cwd=self.tmp, stdout=open(os.path.join(self.tmp, "kiln-up.out"), "w"),
                                     stderr=subprocess.STDOUT)
        eventually(lambda: self.proc.poll() is None and self.status(), 60, 0.5, "kiln up to answer")

    def cli(self, *argv, timeout=60):
        r = subprocess.run([self.args.kiln, "--broker", self.broker, "--json", *argv], capture_output=True,
                           text=True, timeout=timeout)
        if r.returncode != 0:
            raise Failure(f"kiln {' '.join(argv)} exited {r.returncode}: {r.stderr.strip()}")
        return json.loads(r.stdout)

    def status(self):
        return self.cli("status")

    def requeued(self, reason=""):
        """Jobs the broker put back in the queue so far (for `reason` alone, a label such as worker_lost)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("kiln_jobs_requeued_total{") and f'reason="{reason}"' in line + f'reason=""')

    def stop(self):
        stop_process(self.proc, 30)


def unprivileged_user():
    """(uid, gid, why) of the user the workers run as: `nobody` where it may create the user, mount, PID and
    network namespaces a tester confines candidates with (a cluster user's case), else root, and why."""
    try:
        import pwd
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        return 0, 0, "no user 'nobody' here"
    as_nobody = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"]
    probe = subprocess.run(as_nobody + ["unshare", "--user", "--mount", "--pid", "--net", "--fork", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return 0, 0, f"'nobody' cannot create user namespaces here ({probe.stderr.strip()})"
    return nobody.pw_uid, nobody.pw_gid, ""


def as_user(argv, uid, gid):
    return argv if uid == 0 else ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"] + argv


def submit_workers(cluster, kiln, jobs, user):
    uid, gid = user
    # TMPDIR: the workers' state folders land in the test's folder, removed with it.
    argv = ["env", f"TMPDIR={os.path.join(jobs, 'tmp')}", KILN_SLURM, "submit", "--broker", kiln.broker,
            "--bin", os.path.dirname(kiln.args.kiln), "--compilers", "1", "--cpu-testers", "1",
            "--log-dir", os.path.join(jobs, "worker-logs"), "--cpus-per-task=2",
            f"--output={os.path.join(jobs, 'job-%j.out')}"]
    r = cluster.slurm(as_user(argv, uid, gid))
    job = r.stdout.strip().split(";")[0]
    check(job.isdigit(), f"kiln-slurm submitted the workers as Slurm job {job}")

    def registered():
        by = {}
        for w in kiln.status()["workers"]:
            by[w["service"]] = by.get(w["service"], 0) + 1
        return by if by.get("compile", 0) >= 1 and by.get("test.cpu", 0) >= 1 else None
    by = eventually(registered, 120, 1.0, f"the workers of job {job} to register")
    log(f"workers registered: {by} (job state {cluster.job_state(job)})")
    testers = [w for w in kiln.status()["workers"] if w["service"] == "test.cpu"]
    check(all(w["confinement"] == "confined" for w in testers),
          f"the job's tester confines its candidates ({[w['confinement'] for w in testers]})")
    return job


def check_campaign(kiln, cid, budget):
    info = next(c for c in kiln.status()["campaigns"] if c["campaign_id"] == cid)
    check(info["state"] == "done", f"campaign {cid} is done ({info['state']})")
    check(info["scored"] == budget + 1, f"program 0 and {budget} proposals scored ({info['scored']})")
    check(info["not_evaluated"] == 0, f"no candidate of {cid} was left unevaluated ({info['not_evaluated']})")
    progs = kiln.cli("best", cid, "--top", "100")["programs"]
    ids = [p["id"] for p in progs]
    check(len(ids) == budget + 1 and len(set(ids)) == len(ids),
          f"every candidate scored exactly once ({len(ids)} rows, {len(set(ids))} distinct)")
    check_none_judged_on_kill(kiln, cid, progs)
    return info


def check_none_judged_on_kill(kiln, cid, progs=None):
    """No verdict of `cid` blames a candidate for the SIGTERM that stopped a worker (its g++ or its evaluation
    child got the signal too)."""
    progs = progs if progs is not None else kiln.cli("best", cid, "--top", "100")["programs"]
    killed = [f"{p['id']}: {p.get('status')}" for p in progs
              if "SIGTERM" in (p.get("eval_log") or "") + (p.get("status") or "")]
    check(not killed, f"no candidate of {cid} was judged on a kill by SIGTERM ({killed})")


def end_job_while_busy(cluster, kiln, job, jobs, node_loss):
    """Ends `job` as soon as one of its workers holds a job: `scancel` (SIGTERM, the workers stop cleanly),
    or, for `node_loss`, SIGSTOP to every process of the job at once and SIGKILL once the broker has dropped
    them (a node that hangs and dies: the workers say nothing, the broker notices their silence). True when a
    job went back to the queue."""
    reason = "worker_lost" if node_loss else ""
    before = kiln.requeued(reason)
    eventually(lambda: any(w["in_flight"] > 0 for w in kiln.status()["workers"] if w["service"] in JOB_SERVICES),
               120, 0.1, "a worker to hold a job")
    t = time.time()
    if node_loss:
        # The node stops answering (SIGSTOP: its workers fall silent, their connections stay open, as when a
        # node hangs or its network is cut); once the broker has given up on them, it dies for good.
        pids = cluster.signal_job_processes(job, signal.SIGSTOP)
        log(f"SIGSTOP to the {len(pids)} processes of job {job} at once while its workers hold jobs")
    else:
        cluster.slurm(["scancel", job])
        log(f"scancel {job} while its workers hold jobs")

    def gone():
        return not [w for w in kiln.status()["workers"] if w["service"] in JOB_SERVICES]
    eventually(gone, 60, 0.2, f"the broker to drop the workers of job {job}")
    check(True, f"every worker of job {job} left the broker, {time.time() - t:.1f} s after the "
                f"{'node fell silent (missed heartbeats)' if node_loss else 'scancel'}")
    if node_loss:
        cluster.signal_job_processes(job, signal.SIGKILL, pids)
    eventually(lambda: cluster.job_state(job) == "", 120, 0.5, f"job {job} to end")
    logs = os.path.join(jobs, "worker-logs")
    for name in sorted(os.listdir(logs)):
        text = tail(os.path.join(logs, name), 100000)
        started = len(re.findall(r"\] \[info\] worker \S+ for '", text))
        stopped = text.count("] [info] stopped")
        if node_loss:
            check(started >= 1 and stopped == 0, f"{name}: the worker died without a word (started {started})")
            continue
        check(started >= 1 and stopped == started,
              f"{name}: the worker stopped by itself on SIGTERM (started {started}, stopped {stopped})")
        given_back = text.count(" given back: ")
        if given_back:
            log(f"{name}: {given_back} job(s) interrupted by the stop given back, not judged")
    if not node_loss:
        out = tail(os.path.join(jobs, f"job-{job}.out"), 200)
        check("every worker stopped" in out, f"the node script of job {job} saw every worker stop")
    shutil.move(logs, f"{logs}-{job}")
    back = kiln.requeued(reason) - before
    log(f"jobs requeued by the broker since then{' as worker_lost' if node_loss else ''}: {back:.0f}")
    return back > 0


def campaign_state(kiln, cid):
    return next(c for c in kiln.status()["campaigns"] if c["campaign_id"] == cid)["state"]


def interrupted_campaign(cluster, kiln, jobs, user, job, budget, node_loss):
    """A campaign whose workers' job ends mid-way (see end_job_while_busy) and is submitted again: the
    jobs requeue and the campaign finishes, every candidate scored once. Returns the job now running."""
    cid = kiln.cli("submit", TASK, "--budget", str(budget))["campaign_id"]
    requeued = False
    for _ in range(3):
        requeued = end_job_while_busy(cluster, kiln, job, jobs, node_loss)
        check_none_judged_on_kill(kiln, cid)
        job = submit_workers(cluster, kiln, jobs, user)
        if requeued or campaign_state(kiln, cid) == "done":
            break
        log("nothing was in flight when the job ended; ending the next one")
    check(requeued, f"the jobs the {'lost' if node_loss else 'cancelled'} workers held went back to the queue")
    eventually(lambda: campaign_state(kiln, cid) == "done", 600, 1.0, f"campaign {cid} to finish on job {job}")
    check_campaign(kiln, cid, budget)
    return job


def run(args, tmp):
    cluster = Cluster(tmp)
    kiln = Kiln(args, tmp)
    try:
        t = time.time()
        cluster.start_munge()
        cluster.start_slurm()
        log(f"munged, slurmctld and slurmd up on node {cluster.host} in {time.time() - t:.1f} s")
        kiln.start()
        log(f"kiln up (no local workers), broker {kiln.broker}")
        # The workers run as the submitting user, as on a cluster, where the node allows what the tester
        # needs to confine candidates without root (a user namespace); else as root.
        uid, gid, why = unprivileged_user() if args.user == "auto" else (0, 0, "--user root")
        user = (uid, gid)
        jobs = os.path.join(tmp, "jobs")
        os.makedirs(os.path.join(jobs, "tmp"))
        os.chown(jobs, uid, gid)
        os.chown(os.path.join(jobs, "tmp"), uid, gid)
        log(f"the job runs as uid {uid}" + (f": {why}" if why else " (its tester confines in a user namespace)"))

        # 1. A campaign on the Slurm job's workers.
        job = submit_workers(cluster, kiln, jobs, user)
        t = time.time()
        out = kiln.cli("submit", TASK, "--budget", str(args.budget), "--wait", "--timeout", "600", timeout=660)
        cid = out["campaign_id"]
        log(f"campaign {cid} finished in {time.time() - t:.1f} s")
        check_campaign(kiln, cid, args.budget)

        # 2. scancel mid-campaign, then the job again.
        job = interrupted_campaign(cluster, kiln, jobs, user, job, args.budget * 2, node_loss=False)
        # 3. The node lost mid-campaign (every process of the job SIGKILLed), then the job again.
        interrupted_campaign(cluster, kiln, jobs, user, job, args.budget, node_loss=True)
        return 0
    finally:
        kiln.stop()
        cluster.stop()


def main():
    use_name("slurm-test")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "bin", "kiln"), help="the host's kiln CLI")
    ap.add_argument("--budget", type=int, default=4, help="proposals of the first campaign (the second: twice)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (logs, configs)")
    ap.add_argument("--user", choices=("auto", "root"), default="auto",
                    help="auto: the job runs as 'nobody' where it may create user namespaces, else as root")
    args = ap.parse_args()
    args.kiln = os.path.abspath(args.kiln)

    started = time.time()
    tmp = tempfile.mkdtemp(prefix="kiln-slurm-test-")
    os.chmod(tmp, 0o755)  # munged's socket must be reachable through it
    rc = 1
    try:
        missing = [b for b in NEEDED if shutil.which(b) is None and not os.path.exists(f"/usr/sbin/{b}")]
        if missing:
            raise Skip(f"no {', '.join(missing)} here (apt-get install slurm-wlm munge util-linux)")
        if os.geteuid() != 0:
            raise Skip("slurmd runs jobs as their user and needs root here (run as root, as CI does)")
        for exe in ("kiln", "kiln-broker", "kiln-compiler", "kiln-tester", "kiln-eval"):
            if not os.access(os.path.join(os.path.dirname(args.kiln), exe), os.X_OK):
                log(f"FAIL: no {exe} beside {args.kiln} (make build)")
                return 1
        rc = run(args, tmp)
        log(f"PASS in {time.time() - started:.0f} s")
    except Skip as e:
        log(f"SKIP: {e}")
        rc = 77
    except (Failure, subprocess.TimeoutExpired) as e:
        log(f"FAIL: {e}")
        for name in ("kiln-up.out", "slurmctld.log", "slurmd.log"):
            print(f"--- {name}\n{tail(os.path.join(tmp, name))}")
        jobs = os.path.join(tmp, "jobs")
        for d in sorted(os.listdir(jobs) if os.path.isdir(jobs) else []):
            if d.startswith("worker-logs") or d.startswith("job-"):
                p = os.path.join(jobs, d)
                for name in (sorted(os.listdir(p)) if os.path.isdir(p) else [""]):
                    print(f"--- {d}/{name}\n{tail(os.path.join(p, name) if name else p)}")
        rc = 1
    finally:
        if args.keep or rc == 1:
            log(f"logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
