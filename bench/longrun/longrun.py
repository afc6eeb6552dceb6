#!/usr/bin/env python3
"""A Kiln that runs for a while: many small CPU campaigns one after the other, then several at once.

Starts `kiln up` from --bin on free loopback ports in a fresh state folder, and reports as JSON:
  history   per campaign run one after the other (`kiln submit --wait`): broker.db size (file, WAL, pages,
            free pages, job rows), `kiln status` output size and time, the scorer's resident memory;
  together  --together campaigns submitted at once: seconds from submission to each one's end (first,
            median, last); with --priority the last one submitted asks for priority 5.
Only the CLI and the config are read from --bin's version: a CLI without `status --all` lists everything
anyway, and retention keys are written only when asked for (--retention-max-jobs), as older brokers refuse
unknown keys.
"""
import argparse
import json
import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(path, state, args):
    ports = {name: free_port() for name in ("broker", "events", "metrics", "scorer")}
    lines = [
        "broker:",
        f"  bind: tcp://127.0.0.1:{ports['broker']}",
        f"  events_bind: tcp://127.0.0.1:{ports['events']}",
        f"  metrics_port: {ports['metrics']}",
    ]
    if args.retention_max_jobs is not None:
        lines += [f"  retention_max_jobs: {args.retention_max_jobs}", "  retention_interval_s: 1"]
    lines += [
        "ingest: {metrics_port: 0}",
        "llm_bridge: {metrics_port: 0}",
        "compiler: {metrics_port: 0}",
        "tester:",
        "  metrics_port: 0",
        "  timing: {mode: warm, min_samples: 10, min_time_s: 0.05, max_time_s: 1.0, warmup_iters: 2}",
        f"scorer: {{metrics_port: {ports['scorer']}, max_in_flight: {args.max_in_flight}}}",
        f"promoter: {{metrics_port: 0, registry_dir: {state}/registry}}",
        f"up: {{compilers: {args.compilers}, testers: 1}}",
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


class Kiln:
    def __init__(self, args, work):
        self.args = args
        self.state = os.path.join(work, "state")
        self.config = os.path.join(work, "kiln.yaml")
        write_config(self.config, self.state, args)
        self.log = open(os.path.join(work, "up.log"), "w")
        self.up = subprocess.Popen([self.exe(), "--config", self.config, "up", "--state-dir", self.state],
                                   stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 120
        while self.cli(["status"], check=False).returncode != 0:
            if time.time() > deadline or self.up.poll() is not None:
                sys.exit("kiln up did not come up: see " + self.log.name)
            time.sleep(0.5)
        self.has_all = "--all" in self.cli(["status", "--help"], check=False).stdout

    def exe(self):
        return os.path.join(self.args.bin, "kiln")

    def cli(self, argv, check=True, timeout=1800):
        r = subprocess.run([self.exe(), "--config", self.config] + argv, capture_output=True, text=True,
                           timeout=timeout)
        if check and r.returncode != 0:
            sys.exit(f"kiln {' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()}")
        return r

    def stop(self):
        os.killpg(self.up.pid, signal.SIGTERM)
        try:
            self.up.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.up.pid, signal.SIGKILL)
            self.up.wait()

    def service_pid(self, exe_name):
        """The pid of the child of `kiln up` running `exe_name` (whose argv names this state folder)."""
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv and os.path.basename(argv[0].decode()) == exe_name and self.state.encode() in b" ".join(argv):
                return int(pid)
        return None

    def rss_kib(self, exe_name):
        pid = self.service_pid(exe_name)
        if pid is None:
            return None
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return None

    def broker_db(self):
        path = os.path.join(self.state, "broker.db")
        out = {"file_bytes": os.path.getsize(path),
               "wal_bytes": os.path.getsize(path + "-wal") if os.path.exists(path + "-wal") else 0}
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            out["page_bytes"] = db.execute("PRAGMA page_size").fetchone()[0]
            out["pages"] = db.execute("PRAGMA page_count").fetchone()[0]
            out["free_pages"] = db.execute("PRAGMA freelist_count").fetchone()[0]
            out["auto_vacuum"] = db.execute("PRAGMA auto_vacuum").fetchone()[0]
            out["job_rows"] = db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
        finally:
            db.close()
        out["logical_bytes"] = out["page_bytes"] * out["pages"]
        return out

    def status(self):
        argv = ["status"]
        t0 = time.time()
        text = self.cli(argv)
        t1 = time.time()
        js = self.cli(["--json"] + argv)
        listed = len(json.loads(js.stdout)["campaigns"])
        return {"text_bytes": len(text.stdout), "json_bytes": len(js.stdout), "seconds": round(t1 - t0, 3),
                "campaigns_listed": listed}

    def all_campaigns(self):
        argv = ["--json", "status"] + (["--all"] if self.has_all else [])
        return json.loads(self.cli(argv).stdout)["campaigns"]


def history(k, args, task):
    points = []
    for i in range(args.campaigns):
        t0 = time.time()
        k.cli(["submit", task, "--budget", str(args.budget), "--wait", "--campaign-id", f"hist-{i:03d}"])
        took = time.time() - t0
        if (i + 1) % args.every == 0 or i + 1 == args.campaigns:
            time.sleep(args.settle_s)  # a retention pass (interval 1 s) and the scorer's idle state
            point = {"campaigns": i + 1, "last_campaign_s": round(took, 2), "broker_db": k.broker_db(),
                     "status": k.status(), "scorer_rss_kib": k.rss_kib("kiln-scorer"),
                     "broker_rss_kib": k.rss_kib("kiln-broker")}
            points.append(point)
            print(json.dumps(point), file=sys.stderr)
    return points


def together(k, args, task):
    submitted = {}
    for i in range(args.together):
        cid = f"together-{i:02d}"
        argv = ["submit", task, "--budget", str(args.budget), "--campaign-id", cid]
        if args.priority and i == args.together - 1:
            argv += ["--priority", "5"]
        submitted[cid] = time.time()
        k.cli(argv)
    deadline = time.time() + args.timeout_s
    ended = {}
    while len(ended) < len(submitted) and time.time() < deadline:
        for c in k.all_campaigns():
            if c["campaign_id"] in submitted and c["state"] == "done":
                ended[c["campaign_id"]] = c["finished_at"] - submitted[c["campaign_id"]]
        time.sleep(1)
    times = sorted(ended.values())
    out = {"campaigns": args.together, "finished": len(ended),
           "first_s": round(times[0], 1) if times else None,
           "median_s": round(statistics.median(times), 1) if times else None,
           "last_s": round(times[-1], 1) if times else None,
           "per_campaign_s": {cid: round(s, 1) for cid, s in sorted(ended.items())}}
    if args.priority:
        out["priority_campaign"] = f"together-{args.together - 1:02d}"
        out["priority_campaign_s"] = out["per_campaign_s"].get(out["priority_campaign"])
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True, help="folder with kiln and the service executables")
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--label", default="")
    p.add_argument("--task", default=os.path.join(SOURCE, "configs/tasks/softmax"))
    p.add_argument("--campaigns", type=int, default=20, help="campaigns run one after the other")
    p.add_argument("--every", type=int, default=5, help="measure after every this many")
    p.add_argument("--budget", type=int, default=4)
    p.add_argument("--max-in-flight", type=int, default=3)
    p.add_argument("--compilers", type=int, default=2)
    p.add_argument("--together", type=int, default=8, help="campaigns submitted at once (0: none)")
    p.add_argument("--priority", action="store_true", help="the last campaign submitted at once asks priority 5")
    p.add_argument("--retention-max-jobs", type=int, default=None, help="broker.retention_max_jobs (newer brokers)")
    p.add_argument("--settle-s", type=float, default=2.5)
    p.add_argument("--timeout-s", type=float, default=1200)
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="kiln-longrun-")
    k = Kiln(args, work)
    result = {"label": args.label, "bin": args.bin, "task": os.path.basename(args.task), "budget": args.budget,
              "config": open(k.config).read()}
    try:
        result["history"] = history(k, args, args.task)
        if args.together > 0:
            result["together"] = together(k, args, args.task)
            result["after_together"] = {"broker_db": k.broker_db(), "status": k.status(),
                                        "scorer_rss_kib": k.rss_kib("kiln-scorer")}
    finally:
        k.stop()
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps({key: result[key] for key in ("label", "together") if key in result}, indent=2))


if __name__ == "__main__":
    main()
