#!/usr/bin/env bash
# docker/cuda-toolkit.sh [CUDA_HOME] [IMAGE]: make the CUDA toolkit image the CUDA stages of docker/Dockerfile
# copy /usr/local/cuda from, out of a toolkit installed on this host (default /usr/local/cuda; IMAGE default
# kiln-cuda-toolkit:<version>). Only what Kiln uses goes in: nvcc and its tools, NVVM, the headers, the CUDA
# runtime and cuBLAS. Where a registry serves NVIDIA's images, any image with the toolkit at /usr/local/cuda
# does as well:  --build-arg CUDA_TOOLKIT=nvidia/cuda:13.0.0-devel-ubuntu24.04
set -euo pipefail
cuda_home="$(readlink -f "${1:-/usr/local/cuda}")"
[ -x "$cuda_home/bin/nvcc" ] || { echo "cuda-toolkit: no nvcc under $cuda_home" >&2; exit 1; }
version="$("$cuda_home/bin/nvcc" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')"
image="${2:-kiln-cuda-toolkit:$version}"
if docker image inspect "$image" >/dev/null 2>&1; then
  echo "cuda-toolkit: $image is present"
  exit 0
fi
lib="$(readlink -f "$cuda_home/targets/x86_64-linux/lib")"
[ -d "$lib" ] || lib="$(readlink -f "$cuda_home/lib64")"
stage="$(mktemp -d /tmp/kiln-cuda.XXXXXX)"
trap 'rm -rf "$stage"' EXIT
dst="$stage/usr/local/cuda"
mkdir -p "$dst/lib64" "$dst/targets/x86_64-linux"
cp -a "$cuda_home/bin" "$cuda_home/nvvm" "$dst/"
cp -aL "$cuda_home/include" "$dst/include"
for pattern in 'libcudart.so*' 'libcudart_static.a' 'libcudadevrt.a' 'libculibos.a' 'libcublas.so*' 'libcublasLt.so*' 'stubs'; do
  find "$lib" -maxdepth 1 -name "$pattern" -exec cp -a {} "$dst/lib64/" \;
done
ln -s ../../lib64 "$dst/targets/x86_64-linux/lib"
ln -s ../../include "$dst/targets/x86_64-linux/include"
tar -C "$stage" -c usr | docker import -m "CUDA $version toolkit subset from $cuda_home" - "$image" >/dev/null
echo "cuda-toolkit: built $image ($(du -sh "$stage" | cut -f1)) from $cuda_home"
