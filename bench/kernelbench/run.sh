#!/usr/bin/env bash
# The bundled KernelBench-format problems (configs/kernelbench) through kiln-eval, against their PyTorch
# references. JSON on stdout, progress on stderr.
#   bash bench/kernelbench/run.sh BUILD_DIR [PROBLEM...] > results/cpu.json
#       each problem's program 0 (default parameters) and its tuned setting (tuned.txt) timed against
#       the reference (EVAL_ARGS: kiln-eval's timing flags, default "--min-time 0.5 --max-time 5")
#   PAIRED=1 bash bench/kernelbench/run.sh BUILD_DIR [PROBLEM...] > results/paired.json
#       each problem's tuned setting against program 0 (as a C reference) and PyTorch (torch_eager),
#       interleaved in one kiln-eval run
#   SWEEP=1 bash bench/kernelbench/run.sh BUILD_DIR [PROBLEM...] > results/sweep.json
#       every combination of every problem's parameters, correctness only; exits 1 if one fails
#   PYTHON=/path/python3: the interpreter with torch (default /usr/bin/python3); CXX: the compiler (g++)
set -euo pipefail
build=$(realpath "${1:?usage: run.sh BUILD_DIR [PROBLEM...]}")
shift
here=$(cd "$(dirname "$0")" && pwd)
flags=(--eval "$build/bin/kiln-eval" --python "${PYTHON:-/usr/bin/python3}" --eval-args "${EVAL_ARGS:---min-time 0.5 --max-time 5}")
[ -n "${SWEEP:-}" ] && flags+=(--sweep)
[ -n "${PAIRED:-}" ] && flags+=(--paired)
exec "${PYTHON:-/usr/bin/python3}" "$here/kernelbench.py" "${flags[@]}" "$@"
