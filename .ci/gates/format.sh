#!/usr/bin/env bash
# Gate (make format-check): Kiln's own C++ is laid out as .clang-format says, as `make format` leaves it.
# Prints one line per file clang-format would change; exits 1 if there is one, 77 (skipped) where
# clang-format is not installed. CLANG_FORMAT names another binary.
set -euo pipefail
cd "$(dirname "$0")/../.."
clang_format="${CLANG_FORMAT:-clang-format}"
if ! command -v "${clang_format}" >/dev/null 2>&1; then
  echo "KILN-SKIP gate_format: no ${clang_format} (Debian: apt-get install clang-format)"
  exit 77
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  list() { git ls-files --cached --others --exclude-standard -z -- '*.cc' '*.h' '*.cu' '*.cuh'; }
else
  list() { find . -path ./build -prune -o -type f \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0; }
fi
# One clang-format for every file (a process per file takes minutes on a busy machine); it names each
# file it would change in its warnings.
checked=$(list | tr -cd '\0' | wc -c)
echo "KILN-CHECKED ${checked} C++ files against clang-format"
unformatted=$(list | xargs -0 -r "${clang_format}" --dry-run 2>&1 | sed -nE 's/^([^:]+):[0-9]+:[0-9]+: (warning|error):.*/\1/p' | sort -u)
[[ -z "${unformatted}" ]] && exit 0
while IFS= read -r file; do
  echo "format gate: ${file#./}: not as clang-format lays it out (make format fixes it)"
done <<< "${unformatted}"
exit 1
