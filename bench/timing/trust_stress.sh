#!/usr/bin/env bash
# The trust battery under load: `ctest -L trust` RUNS times in a row while `ctest -j2 -LE trust` runs the
# rest of the suite beside it, over and over, in BUILD (default build). Prints one line per run and the
# tally; exits non-zero unless every run passed. Logs of each run: $TMPDIR/trust-stress-<i>.log.
#   bash bench/timing/trust_stress.sh [RUNS] [BUILD]
set -u
runs=${1:-10}
build=$(realpath "${2:-build}")
logs=${TMPDIR:-/tmp}
stop=$(mktemp)
rm -f "$stop"
( cd "$build" && while [ ! -e "$stop" ]; do ctest -j2 -LE trust > /dev/null 2>&1; done ) &
beside=$!
pass=0
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  if (cd "$build" && ctest -L trust --output-on-failure > "$logs/trust-stress-$i.log" 2>&1); then r=pass; pass=$((pass + 1)); else r=FAIL; fi
  echo "run $i: $r in $(( $(date +%s) - start )) s, load $(cut -d' ' -f1 /proc/loadavg)"
done
touch "$stop"
wait "$beside"
rm -f "$stop"
echo "trust: $pass/$runs passed beside ctest -j2 -LE trust"
[ "$pass" -eq "$runs" ]
