#!/usr/bin/env bash
# On a GPU host, from binaries built elsewhere and packed with their runtime libraries into
# build-gpu/kit.tar.xz (.gpu-rt/ and build-gpu/bin/, by bench/timing/make_gpu_kit.sh): the GPU suite
# (KILN_GPU_TESTS=1), the CUDA runner's A/A bench, and the CPU trust battery. Logs and JSON go to $OUT (or ./gpu-out).
#   bash bench/timing/device_gpu_check.sh [tests] [bench] [trust]
set -uo pipefail
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
root=$PWD
tar xJf build-gpu/kit.tar.xz
# The binaries carry the absolute source and build paths they were configured with (make_gpu_kit.sh
# records the source folder in the kit).
src=$(cat build-gpu/source_dir 2>/dev/null || echo "$root")
if [ "$src" != "$root" ] && [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"; fi
build=$(cat build-gpu/build_dir 2>/dev/null || echo build)
mkdir -p "$root/$build" && ln -sfn "$root/build-gpu/bin" "$root/$build/bin"
[ -e build/bin ] || { mkdir -p build && ln -sfn "$root/build-gpu/bin" build/bin; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=$root/.gpu-rt/lib:/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$out/nvidia-smi.csv"
ldd build/bin/kiln-eval-cuda build/bin/test_gpu | grep "not found" | sort -u
for step in "$@"; do
  case $step in
    # GPU_FILTER is one Catch2 test spec (names with spaces, comma-separated alternatives, wildcards).
    tests) KILN_GPU_TESTS=1 timeout ${GPU_TIMEOUT:-540} build/bin/test_gpu -d yes ${GPU_FILTER:+"$GPU_FILTER"} > "$out/gpu_tests.log" 2>&1
           echo "test_gpu exit $?"; grep -E "speedup|passed|failed|FAILED|with expansion|seconds:|sandbox" "$out/gpu_tests.log" | head -70 ;;
    # The same tests as an ordinary user (nobody): the sandbox then confines through a user namespace. The
    # tree is copied where that user can read it, and the source path the binaries carry points there.
    user-tests) copy=/tmp/kiln-as-user; rm -rf "$copy"; cp -aL "$root" "$copy"; chmod -R a+rX "$copy"
           ln -sfn "$copy" "$src" 2>/dev/null || true
           (cd "$copy" && KILN_GPU_TESTS=1 HOME=/tmp LD_LIBRARY_PATH=$copy/.gpu-rt/lib:/usr/local/cuda/lib64:/usr/local/nvidia/lib64 \
              timeout ${GPU_TIMEOUT:-540} setpriv --reuid=65534 --regid=65534 --clear-groups \
              "$copy/build-gpu/bin/test_gpu" -d yes ${GPU_FILTER:+"$GPU_FILTER"}) > "$out/gpu_tests_user.log" 2>&1
           echo "test_gpu (as nobody) exit $?"; grep -E "passed|failed|FAILED|with expansion|refused|SUCCEEDED|confined" "$out/gpu_tests_user.log" | head -50
           [ "$src" != "$root" ] && ln -sfn "$root" "$src" ;;
    bench) timeout ${BENCH_TIMEOUT:-170} bash bench/timing/cuda_runner.sh build/bin/kiln-eval-cuda "${RUNS:-5}" > "$out/cuda_runner.json" 2> "$out/cuda_runner.log"
           echo "bench exit $?"; cat "$out/cuda_runner.log" | cut -c1-160 | head -40 ;;
    trust) for t in ${TRUST_TESTS:-test_trust test_trust_timing}; do timeout 90 build/bin/$t > "$out/$t.log" 2>&1; echo "$t exit $?"; grep -E "passed|failed" "$out/$t.log" | tail -3; done ;;
  esac
done
