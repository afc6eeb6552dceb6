#!/usr/bin/env python3
"""Retention on a real job table: a copy of a broker.db (say, the one longrun.py left by an older broker)
opened by kiln-broker from --bin with broker.retention_max_jobs set and a pass every second. Reports the
file before and after as JSON: size on disk, pages, free pages, auto_vacuum mode, job rows.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def describe(path):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        q = lambda sql: db.execute(sql).fetchone()[0]
        out = {"page_bytes": q("PRAGMA page_size"), "pages": q("PRAGMA page_count"),
               "free_pages": q("PRAGMA freelist_count"), "auto_vacuum": q("PRAGMA auto_vacuum"),
               "job_rows": q("SELECT COUNT(*) FROM jobs"),
               "ended_rows": q("SELECT COUNT(*) FROM jobs WHERE state IN ('done','failed','dead')")}
    finally:
        db.close()
    out["file_bytes"] = os.path.getsize(path)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--bin", required=True, help="folder with kiln-broker")
    p.add_argument("--db", required=True, help="a broker.db to copy")
    p.add_argument("--keep", type=int, default=150, help="broker.retention_max_jobs")
    p.add_argument("--run-s", type=float, default=4.0, help="how long the broker runs")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="kiln-retention-")
    db = os.path.join(work, "broker.db")
    shutil.copyfile(args.db, db)
    before = describe(db)
    config = os.path.join(work, "kiln.yaml")
    with open(config, "w") as f:
        f.write(f"broker:\n  bind: tcp://127.0.0.1:{free_port()}\n  events_bind: tcp://127.0.0.1:{free_port()}\n  metrics_port: 0\n"
                f"  retention_max_jobs: {args.keep}\n  retention_interval_s: 1\n")
    log = open(os.path.join(work, "broker.log"), "w")
    t0 = time.time()
    broker = subprocess.Popen([os.path.join(args.bin, "kiln-broker"), "--config", config, "--state-dir", work,
                               "--metrics-port", "0"], stdout=log, stderr=subprocess.STDOUT)
    time.sleep(args.run_s)
    broker.send_signal(signal.SIGTERM)
    broker.wait(30)
    after = describe(db)
    lines = [l.strip() for l in open(log.name) if "retention" in l or "incremental vacuum" in l]
    result = {"db": args.db, "keep": args.keep, "before": before, "after": after, "broker_log": lines,
              "seconds": round(time.time() - t0, 1)}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    sys.exit(main())
