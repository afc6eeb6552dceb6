#!/usr/bin/env bash
# Bytes on the wire per candidate: a whole Kiln (kiln-bench-multigpu, one tester) runs the bundled tasks of
# a backend with the tuner, and what the broker moved for it (jobs out, results with their follow-ups in,
# submits, the blob store's requests and replies; the bench's own status queries left out) is divided by the
# candidates scored. KILN_BROKER_BLOB_STORE=0 runs the same with every job carrying its task package and
# reference (as before schema 3), for the comparison.
#   bash bench/broker/wire_bytes.sh [build dir] [label]     (BACKEND=cpu|cuda, BUDGET=6)
set -euo pipefail
build=${1:-build}
label=${2:-now}
backend=${BACKEND:-cpu}
budget=${BUDGET:-6}
here=$(cd "$(dirname "$0")" && pwd)
out="$here/results/wire_bytes_${backend}_${label}.json"
"$build/bin/kiln-bench-multigpu" --backend "$backend" --testers 1 --budget "$budget" --out "$out" >/dev/null
python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
w = r["wire"]
print(json.dumps({"candidates_scored": r["candidates_scored"], "exactly_once": r["exactly_once"],
                  "wall_s": round(r["wall_s"], 1), "pipeline_bytes": w["pipeline_bytes"],
                  "blob_bytes": w["blob_bytes"],
                  "pipeline_bytes_per_candidate": round(w["pipeline_bytes_per_candidate"]),
                  "all_bytes_per_candidate": round(w["bytes_per_candidate"])}))
PY
