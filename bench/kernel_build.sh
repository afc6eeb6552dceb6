# Sourced by the bench scripts: builds a kernel the way the compiler service does, outside it.
#   with_abi DIR          DIR/kiln/kernel_abi.h, as a task's sources include it
#   nvcc_build DIR ARGS   nvcc -shared for $CUDA_ARCH (default sm_90), the ABI header from DIR
#   gxx_build DIR ARGS    g++ -shared, the ABI header from DIR
# NVCC: the nvcc to use (default /usr/local/cuda/bin/nvcc).
kernel_build_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
arch=${CUDA_ARCH:-sm_90}
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
with_abi() { mkdir -p "$1/kiln" && cp "$kernel_build_root/libs/core/include/kiln/kernel_abi.h" "$1/kiln/"; }
nvcc_build() {
  local dir=$1; shift
  "$nvcc" -O3 -shared -Xcompiler -fPIC -gencode "arch=compute_${arch#sm_},code=[sm_${arch#sm_},compute_${arch#sm_}]" \
    -cudart shared -I"$dir" "$@"
}
gxx_build() { local dir=$1; shift; g++ -O3 -march=native -fopenmp -shared -fPIC -std=c++17 -I"$dir" "$@"; }
