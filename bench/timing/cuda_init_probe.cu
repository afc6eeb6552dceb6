// kiln-cuda-init-probe: initializes the CUDA runtime and says how it went (for kiln-confine-probe).
#include <cuda_runtime.h>

#include <cstdio>

int main() {
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess) {
    std::printf("cudaGetDeviceCount: %s (%s)\n", cudaGetErrorName(e), cudaGetErrorString(e));
    return 1;
  }
  void* p = nullptr;
  e = cudaMalloc(&p, 1 << 20);
  std::printf("devices %d, cudaMalloc: %s\n", devices, cudaGetErrorName(e));
  return e == cudaSuccess ? 0 : 1;
}
