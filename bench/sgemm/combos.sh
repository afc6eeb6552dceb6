#!/usr/bin/env bash
# Prints every combination of a task's `params:` (task.yaml), one a line as NAME=value words, the first
# value of each parameter first (program 0's), the last parameter varying fastest.
# Usage: combos.sh path/to/task.yaml
set -euo pipefail
yaml=${1:?usage: combos.sh task.yaml}
# "  NAME: [v1, v2]" lines under "params:", up to the next unindented line.
mapfile -t lines < <(awk '/^params:/ {on = 1; next} on && /^[^ #]/ {on = 0} on && /^ +[A-Za-z_][A-Za-z0-9_]*: *\[/' "$yaml")
[ ${#lines[@]} -gt 0 ] || { echo "combos.sh: no params in $yaml" >&2; exit 1; }
combos=("")
for line in "${lines[@]}"; do
  name=$(sed -E 's/^ *([A-Za-z_][A-Za-z0-9_]*):.*/\1/' <<<"$line")
  values=$(sed -E 's/^[^[]*\[([^]]*)\].*/\1/; s/,/ /g' <<<"$line")
  next=()
  for c in "${combos[@]}"; do
    for v in $values; do next+=("${c:+$c }$name=$v"); done
  done
  combos=("${next[@]}")
done
printf '%s\n' "${combos[@]}"
