#!/usr/bin/env bash
# On a GPU host, from build-gpu/kit.tar.xz (bench/timing/make_gpu_kit.sh .gpu-rt services: the service binaries, the
# CUDA evaluator and kiln-bench-multigpu): the throughput bench. A whole Kiln on the five bundled CUDA
# tasks with the tuner proposer, one run per tester count; candidates per hour per GPU, GPU utilization,
# where the time went. JSON, the testers' logs and the registry go to $OUT (or ./gpu-out).
#   TAG=after TESTERS=1 BUDGET=12 bash bench/throughput/device_run.sh
# Any KILN_<SECTION>_<KEY> in the environment reaches the Kiln the bench starts (KILN_TESTER_TIMING_SCREEN_BELOW=0).
# CAMPAIGN_PREFIX=p: campaign ids p.<task>, so runs under one prefix try the same parameter sets.
# COMPILERS=n COMPILER_SLOTS=k: n compilers of k slots each (k > 1: the tuner's CUDA builds are batched).
# KIT=path: unpack that kit instead of build-gpu/kit.tar.xz (a baseline build, say).
set -uo pipefail
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
root=$PWD
tag=${TAG:-run}
tar xJf "${KIT:-build-gpu/kit.tar.xz}"  # KIT=build-gpu/other.tar.xz: another build of the same binaries
src=$(cat build-gpu/source_dir 2>/dev/null || echo "$root")
if [ "$src" != "$root" ] && [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"; fi
build=$(cat build-gpu/build_dir 2>/dev/null || echo build)
mkdir -p "$root/$build" && ln -sfn "$root/build-gpu/bin" "$root/$build/bin"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=$root/.gpu-rt/lib:/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$out/nvidia-smi.csv"
timeout "${BENCH_TIMEOUT:-560}" "$root/build-gpu/bin/kiln-bench-multigpu" --backend cuda --tasks configs/tasks \
  --testers "${TESTERS:-1}" --budget "${BUDGET:-12}" --compilers "${COMPILERS:-8}" \
  --compiler-slots "${COMPILER_SLOTS:-1}" --timeout "${RUN_TIMEOUT:-300}" \
  --out "$out/throughput-$tag.json" --keep "$out/keep-$tag" ${CAMPAIGN_PREFIX:+--campaign-prefix "$CAMPAIGN_PREFIX"} \
  2> "$out/throughput-$tag.log" > /dev/null
rc=$?
echo "bench exit $rc"
# A run that failed says why here (only a few files come back from a GPU host).
[ "$rc" -ne 0 ] && tail -c 3000 "$out/throughput-$tag.log"
grep -E "^run:" "$out/throughput-$tag.log"
python3 - "$out/throughput-$tag.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["runs"]:
    print({k: r.get(k) for k in ("testers", "wall_s", "candidates_scored", "candidates_per_hour", "all_campaigns_done",
                                  "exactly_once", "gpu_utilization_ratio", "pipeline", "test_phases")})
    for c in r["campaigns"]:
        print(" ", c["task"], c["scored"], "best %.2f" % c["best_speedup"], c["best_speedup_interval"], "promoted", c["promoted"])
PY
# Nothing of the stopped Kiln may still run while the re-measurement times (it would disturb it).
left=$(pgrep -c -f "$root/build-gpu/bin/kiln-" || true)
echo "kiln processes left after the bench: ${left:-0}"
if [ "${left:-0}" -gt 0 ]; then pkill -KILL -f "$root/build-gpu/bin/kiln-"; sleep 1; fi
nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader
# Every promoted kernel re-measured in an independent evaluator run, against what the registry says.
for reg in "$out/keep-$tag"/*/registry; do
  [ -f "$reg/verified_kernels.json" ] || continue
  run=$(basename "$(dirname "$reg")")
  timeout "${REMEASURE_TIMEOUT:-300}" bash bench/throughput/remeasure.sh "$reg" configs/tasks "$root/build-gpu/bin" > "$out/remeasure-$tag-$run.jsonl" 2>&1
  echo "remeasure $run exit $?: $(tail -1 "$out/remeasure-$tag-$run.jsonl")"
  # First measurement against confirmation of every promoted kernel (disjoint intervals: they disagree).
  python3 bench/throughput/agreement.py "$reg" >> "$out/remeasure-$tag-$run.jsonl"
  echo "agreement $run: $(tail -1 "$out/remeasure-$tag-$run.jsonl")"
done
# At most a few files come back from a GPU host: the JSON, the re-measurements and one archive with the
# bench's and the services' logs and the kept registries (two tags fit in one call's eight files).
for f in "$out"/remeasure-$tag-*.jsonl; do [ -f "$f" ] && grep -v '^{"kernels"' "$f" | cut -c1-400; done
mv "$out/throughput-$tag.log" "$out/keep-$tag/"
tar czf "$out/keep-$tag.tar.gz" -C "$out" "keep-$tag" && rm -rf "$out/keep-$tag"
