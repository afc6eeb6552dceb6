#!/usr/bin/env python3
"""Whether a run.sh result qualifies the candidate as cuda_sgemm's program 0: every parameter combination
built, passed memcheck and was correct, and the best reached at least MIN_RATIO of cuBLAS's speed.

    python3 bench/sgemm/qualifies.py OUT/results.jsonl [--min-ratio 0.9]

Prints one line saying why, and exits 0 when it qualifies, 1 when it does not, 2 when the file is unusable.
"""
import argparse
import json
import sys


def verdict(lines, min_ratio):
    rows = [json.loads(line) for line in lines if line.strip()]
    if not rows:
        return False, "no combination was run"
    wrong = [r for r in rows if not r.get("correct")]
    if wrong:
        why = "; ".join("%s: %s" % (r.get("params"), r.get("why", "wrong values")) for r in wrong[:3])
        return False, "%d of %d combinations failed (%s)" % (len(wrong), len(rows), why)
    best = max(rows, key=lambda r: r.get("ratio", 0))
    ratio = best.get("ratio", 0)
    text = "best %.3fx cuBLAS (%s, %.1f us vs %.1f us) over %d correct combinations" % (
        ratio, best.get("params"), best.get("kernel_us", 0), best.get("cublas_us", 0), len(rows))
    return ratio >= min_ratio, text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--min-ratio", type=float, default=0.9)
    args = ap.parse_args()
    try:
        with open(args.results) as f:
            ok, text = verdict(f.readlines(), args.min_ratio)
    except (OSError, ValueError) as e:
        print("qualifies.py: %s: %s" % (args.results, e))
        return 2
    print(("qualifies: " if ok else "does not qualify: ") + text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
