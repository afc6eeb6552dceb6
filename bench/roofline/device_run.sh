#!/usr/bin/env bash
# Runs the CUDA backend's checks on a GPU machine from binaries built elsewhere (build-cuda/bin) with their
# runtime libraries (.gpu-rt, from ../shared/tools/gpu-runtime-libs). Steps: tests | bench | demo (any
# list). Results go to $OUT (or ./gpu-out).
#   bench/roofline/device_run.sh tests bench
set -uo pipefail
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
root=$PWD
# The binaries carry the absolute source and build paths they were configured with.
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' build-cuda/CMakeCache.txt 2>/dev/null)
src=${src:-$root}
if [ "$src" != "$root" ] && [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"; fi
cd "$src" || exit 1
# Kiln uses no NVLink multicast; keep it off for anything else the machine runs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=$root/.gpu-rt/lib:/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu,memory.used --format=csv | tee "$out/nvidia-smi.csv"
missing=$(ldd build-cuda/bin/kiln-eval-cuda build-cuda/bin/kiln build-cuda/bin/test_gpu | grep "not found" | sort -u)
[ -n "$missing" ] && echo "missing libraries: $missing"
for step in "$@"; do
  case $step in
    tests)
      KILN_GPU_TESTS=1 timeout 240 build-cuda/bin/test_gpu -d yes 2>&1 | tee "$out/gpu_tests.log" | grep -E "speedup|passed|failed|FAILED|with expansion|SKIPPED|seconds:" | head -60
      ;;
    cuda-sandbox)
      KILN_GPU_TESTS=1 timeout 200 build-cuda/bin/test_gpu "the CUDA child runs without*" 2>&1 | tee "$out/gpu_sandbox.log" | grep -E "sandbox|passed|failed" | head
      ;;
    trust)
      # The CPU cheating battery and A/A on a host with free cores (the racing-thread cheat needs one).
      for t in test_trust test_trust_timing; do
        timeout 200 build-cuda/bin/$t 2>&1 | tee "$out/$t.log" | grep -E "passed|failed|FAILED" | head -20
      done
      ;;
    aa)
      KILN_GPU_TESTS=1 timeout 120 build-cuda/bin/test_gpu -d yes "A/A*" 2>&1 | tee "$out/gpu_aa.log" | grep -E "speedup|passed|failed|FAILED" | head -20
      ;;
    bench)
      timeout 330 build-cuda/bin/kiln-bench-roofline --out "$out/roofline${ROOFLINE_ONLY:+-$ROOFLINE_ONLY}.json" \
        ${ROOFLINE_ONLY:+--only $ROOFLINE_ONLY} 2>&1 | grep -v '"all"' | tee "$out/roofline${ROOFLINE_ONLY:+-$ROOFLINE_ONLY}.log"
      ;;
    multigpu)
      # One tester per GPU: 1..N testers over the bundled CUDA tasks, then (MG_KILL=1) a run that SIGKILLs one.
      ngpu=$(nvidia-smi -L | grep -c "^GPU")
      counts=${MG_TESTERS:-$(seq -s, 1 "$ngpu")}
      nvidia-smi topo -m > "$out/nvidia-topo.txt" 2>&1
      timeout "${MG_TIMEOUT_S:-560}" build-cuda/bin/kiln-bench-multigpu --backend cuda --tasks configs/tasks \
        --testers "$counts" --budget "${MG_BUDGET:-6}" --compilers "${MG_COMPILERS:-8}" ${MG_KILL:+--kill-one} \
        --timeout "${MG_RUN_TIMEOUT_S:-240}" --out "$out/multigpu${MG_TAG:+-$MG_TAG}.json" \
        2> "$out/multigpu${MG_TAG:+-$MG_TAG}.log" > /dev/null
      echo "multigpu exit $?"; grep -E "^run:|killed" "$out/multigpu${MG_TAG:+-$MG_TAG}.log"
      python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
for r in d["runs"]: print({k: r[k] for k in ("testers","wall_s","candidates_scored","candidates_per_hour","exactly_once","requeued_test_jobs","gpu_utilization_ratio","killed")})' \
        "$out/multigpu${MG_TAG:+-$MG_TAG}.json" 2>&1 | head -20
      ;;
    demo)
      state=/tmp/kiln-demo-state
      rm -rf "$state" /tmp/kiln-demo-registry
      KILN_TESTER_BACKEND=cuda KILN_UP_STATE_DIR=$state KILN_PROMOTER_REGISTRY_DIR=/tmp/kiln-demo-registry \
      KILN_TESTER_TIMING_MIN_TIME_S=0.3 KILN_TESTER_TIMING_MAX_TIME_S=4 KILN_UP_COMPILERS=6 \
        timeout "${DEMO_TIMEOUT_S:-560}" build-cuda/bin/kiln up --demo --budget "${DEMO_BUDGET:-4}" --timeout "$(( ${DEMO_TIMEOUT_S:-560} - 40 ))" 2>&1 | tail -80 | tee "$out/demo.log"
      cp /tmp/kiln-demo-registry/verified_kernels.json "$out/" 2>/dev/null
      build-cuda/bin/kiln registry list --json > "$out/registry_list.json" 2>/dev/null
      tar czf "$out/demo-state.tgz" --exclude=compile-cache -C /tmp kiln-demo-state kiln-demo-registry 2>/dev/null
      ;;
  esac
done
