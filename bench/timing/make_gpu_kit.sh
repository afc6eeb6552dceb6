#!/usr/bin/env bash
# Packs binaries built here, with the runtime libraries they need, into build-gpu/kit.tar.xz for a GPU host
# that has CUDA but not Kiln's other libraries (device_gpu_check.sh, gpu_campaign.sh unpack it there).
# The binaries carry the absolute source folder they were configured with (tests find their data through
# it); it travels in the kit as build-gpu/source_dir.
#   bash bench/timing/make_gpu_kit.sh RUNTIME_LIBS_DIR [BINARY ...]   (default: the evaluators and test_gpu; BUILD=folder, default build)
#   bash bench/timing/make_gpu_kit.sh .gpu-rt services kiln-bench-compile   (`services`: what kiln up starts, and the throughput bench)
set -euo pipefail
rt=${1:?usage: make_gpu_kit.sh RUNTIME_LIBS_DIR [BINARY ...]}
shift
bins=()
for b in "$@"; do
  # `services`: every binary a whole Kiln needs (kiln up starts them), for bench/throughput/device_run.sh.
  if [ "$b" = services ]; then
    bins+=(kiln kiln-broker kiln-compiler kiln-tester kiln-scorer kiln-llm-bridge kiln-promoter kiln-task-ingest
           kiln-eval-cuda kiln-eval kiln-bench-multigpu)
  else
    bins+=("$b")
  fi
done
[ ${#bins[@]} -gt 0 ] || bins=(kiln-eval kiln-eval-cuda test_gpu test_trust test_trust_timing)
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-build}  # the build folder to take the binaries from
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/build-gpu/bin"
for b in "${bins[@]}"; do strip -o "$work/build-gpu/bin/$b" "$root/$build/bin/$b"; done
grep -m1 '^CMAKE_HOME_DIRECTORY:INTERNAL=' "$root/$build/CMakeCache.txt" | cut -d= -f2 > "$work/build-gpu/source_dir"
echo "$build" > "$work/build-gpu/build_dir"  # the tests look for their binaries in <source>/<build>/bin
cp -a "$rt" "$work/.gpu-rt"
mkdir -p "$root/build-gpu"
(cd "$work" && tar cJf "$root/build-gpu/kit.tar.xz" .gpu-rt build-gpu)
echo "make_gpu_kit: $(du -h "$root/build-gpu/kit.tar.xz" | cut -f1) with ${bins[*]}"
