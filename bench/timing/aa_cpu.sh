#!/usr/bin/env bash
# A/A coverage on the CPU: runs test_trust_timing's hidden "[aa_coverage]" case RUNS times (the reference
# timed against itself by kiln-eval with the tester's defaults) and counts the runs whose 95 % speedup
# interval held 1.0 (about 19 in 20 expected). JSON on stdout.
#   bash bench/timing/aa_cpu.sh BUILD_DIR [RUNS]
set -uo pipefail
build=$(realpath "${1:?usage: aa_cpu.sh BUILD_DIR [RUNS]}")
runs=${2:-20}
held=0
for _ in $(seq 1 "$runs"); do
  if KILN_BIN_DIR="$build/bin" "$build/bin/test_trust_timing" "[aa_coverage]" > /dev/null 2>&1; then
    held=$((held + 1))
  fi
done
printf '{"runs": %d, "intervals_containing_1": %d}\n' "$runs" "$held"
