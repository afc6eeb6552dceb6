#!/usr/bin/env bash
# Gate: no source file of services/, libs/, tools/ or proto-msgs/ is over 600 lines (tests live under tests/
# and generated files in the build folder, so neither is looked at). A file named in oversize.txt may keep
# the length written there until it is split, never grow. Prints one line per file over its limit, then how
# many files it checked (KILN-CHECKED, tests/tools/ctest_summary.py); exits 1 if one is over.
set -euo pipefail
cd "$(dirname "$0")/../.."
limit=600
declare -A allowed=()
while read -r path lines _; do
  [[ -z "${path}" || "${path}" == \#* ]] && continue
  allowed["${path}"]="${lines}"
done < .ci/gates/oversize.txt
status=0
checked=0
while IFS= read -r -d '' file; do
  file="${file#./}"
  checked=$((checked + 1))
  lines=$(wc -l < "${file}")
  max="${allowed[${file}]:-${limit}}"
  if (( lines > max )); then
    echo "file-size gate: ${file}: ${lines} lines, over ${max} (split it by concept, one file pair each)"
    status=1
  fi
done < <(find services libs tools proto-msgs -type f \
           \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.py' -o -name '*.sh' \) \
           -not -path '*/tests/*' -not -name '*_test.cc' -print0 | sort -z)
echo "KILN-CHECKED ${checked} files against their line limit"
exit "${status}"
