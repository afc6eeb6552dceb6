#!/usr/bin/env bash
# CPU check of the candidate cuda_sgemm kernel (candidate/kernel.cu; TASK_DIR names another) for every parameter combination (or those given): the
# kernel made host C++ (sgemm_emu.cc says how), built with AddressSanitizer, run on edge shapes.
# No GPU needed. Usage: bench/sgemm/emu.sh ["BM=128 BN=128 ..." ...]; SANITIZE=thread for ThreadSanitizer;
# SHAPES="M N K ..." to choose the shapes. Writes to ${OUT:-./out}/emu; exit status 0 when all pass.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
task=${TASK_DIR:-$here/candidate}
out=${OUT:-./out}/emu
mkdir -p "$out"
sanitize=${SANITIZE:-address}
# The task's correctness shapes, then edges of the float4 paths (N % 4 == 0 with partial tiles, K tails).
shapes=${SHAPES:-"1 1 1  17 33 65  128 128 128  100 257 129  513 300 1000  260 132 27  3 516 8  1 4 17"}
if [ $# -gt 0 ]; then combos=("$@"); else mapfile -t combos < <("$here/combos.sh" "$task/task.yaml"); fi
# kernel<<<grid, threads, smem, stream>>>(args) -> kiln_emu_launch(kernel, grid, threads, smem, stream, args);
# extern __shared__ T name[]; -> T* name = (T*)kiln_emu_smem;
sed -E -e 's/([A-Za-z_][A-Za-z0-9_]*)<<<(.*)>>>\(/kiln_emu_launch(\1, \2, /' \
       -e 's/extern __shared__ ([A-Za-z0-9_]+) ([A-Za-z0-9_]+)\[\];/\1* \2 = reinterpret_cast<\1*>(kiln_emu_smem);/' \
       "$task/kernel.cu" >"$out/kernel_host.inc"
fail=0
for combo in "${combos[@]}"; do
  tag=$(tr ' =' '_-' <<<"$combo")
  defs=()
  for kv in $combo; do defs+=("-D$kv"); done
  if ! "${CXX:-g++}" -std=c++20 -O1 -g -fsanitize="$sanitize" -fno-omit-frame-pointer -Wall -Wextra -Wno-unknown-pragmas \
      -Wno-unused-parameter "${defs[@]}" -I"$out" -I"$root/libs/core/include" -o "$out/emu_$tag" \
      "$here/sgemm_emu.cc" -pthread >"$out/build_$tag.log" 2>&1; then
    echo "FAIL build $combo (see $out/build_$tag.log)"; fail=1; continue
  fi
  if "$out/emu_$tag" $shapes >"$out/run_$tag.log" 2>&1; then
    echo "ok   $combo"
  else
    echo "FAIL $combo"; cat "$out/run_$tag.log" | head -40; fail=1
  fi
done
# What ran, for make test's check that every passing entry ran something (tests/tools/ctest_summary.py).
[ $fail -eq 0 ] && echo "KILN-CHECKED ${#combos[@]} combinations on $(($(wc -w <<<"$shapes") / 3)) shapes"
exit $fail
