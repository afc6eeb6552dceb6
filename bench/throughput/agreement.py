#!/usr/bin/env python3
"""Per promoted kernel of a verified-kernel registry: its first measurement against its confirmation.

Prints one JSON line per kernel (both speedups and intervals, their ratio, whether the intervals overlap)
and a summary line. Two measurements of one kernel whose intervals are disjoint disagree beyond what each
claims for itself: the registry's number (the confirmation's) then depends on which run it came from.
    python3 bench/throughput/agreement.py REGISTRY_DIR
"""
import json
import sys


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    with open(argv[1] + "/verified_kernels.json") as f:
        kernels = json.load(f)["kernels"]
    disjoint = 0
    for e in kernels:
        by = {m.get("purpose"): m for m in e.get("evidence", {}).get("measurements", [])}
        first, confirm = by.get("eval"), by.get("confirm")
        if not first or not confirm:
            print(json.dumps({"kernel_id": e["kernel_id"], "error": "no eval and confirm measurements"}))
            continue
        (a, b), (c, d) = first["speedup_interval"], confirm["speedup_interval"]
        overlap = not (b < c or d < a)
        disjoint += not overlap
        print(json.dumps({"kernel_id": e["kernel_id"], "eval": round(first["speedup"], 3),
                          "eval_interval": [round(a, 3), round(b, 3)], "confirm": round(confirm["speedup"], 3),
                          "confirm_interval": [round(c, 3), round(d, 3)],
                          "ratio": round(confirm["speedup"] / first["speedup"], 4), "overlap": overlap}))
    print(json.dumps({"kernels": len(kernels), "disjoint": disjoint}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
