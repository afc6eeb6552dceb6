#include "draw.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;

int blocks_for(size_t work) {
  const size_t wanted = (work + kThreads - 1) / kThreads;
  return static_cast<int>(wanted < kMaxBlocks ? wanted : kMaxBlocks);
}

// SplitMix64 (kiln/eval/tensor.h): the output for state `z`.
__device__ uint64_t splitmix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Draw k (from 0) of a generator seeded with `seed`: its state has gone up by the increment k + 1 times.
__device__ uint64_t nth_draw(uint64_t seed, uint64_t k) { return splitmix(seed + (k + 1) * kGamma); }

__device__ uint64_t mix_seed(uint64_t a, uint64_t b) { return nth_draw(a * 0x100000001B3ull ^ (b + kGamma), 0); }

// normal_pair(seed, pair) of the host: Marsaglia's polar method in single precision, each pair from its
// own generator.
__device__ void normal_pair(uint64_t seed, uint64_t pair, float& x, float& y) {
  uint64_t state = mix_seed(seed, pair);
  for (;;) {
    state += kGamma;
    const uint64_t bits = splitmix(state);
    const float u = __fsub_rn(__fmul_rn(static_cast<float>(bits >> 40), 0x1.0p-23f), 1.0f);
    const float v = __fsub_rn(__fmul_rn(static_cast<float>((bits >> 16) & 0xFFFFFF), 0x1.0p-23f), 1.0f);
    const float s = __fadd_rn(__fmul_rn(u, u), __fmul_rn(v, v));
    if (s >= 1 || s == 0) continue;
    const float f = __fsqrt_rn(__fdiv_rn(__fmul_rn(-2.0f, logf(s)), s));
    x = __fmul_rn(u, f);
    y = __fmul_rn(v, f);
    return;
  }
}

// float_to_half() and float_to_bf16() of libs/eval/src/tensor.cc, bit for bit.
__device__ uint16_t to_half(float f) {
  const uint32_t x = __float_as_uint(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - e;
    uint32_t half_mant = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
    return static_cast<uint16_t>(sign | half_mant);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(half);
}

__device__ uint16_t to_bf16(float f) {
  uint32_t x = __float_as_uint(f);
  if (isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

// saturate<T>() of the host: NaN to 0, rounded to nearest even, clamped to T's range.
template <class T>
__device__ T saturate(double v, double lo, double hi) {
  if (isnan(v)) return 0;
  return static_cast<T>(fmin(fmax(rint(v), lo), hi));
}

// HostTensor::set(i, v).
__device__ void store(void* data, CompareType type, size_t i, double v) {
  switch (type) {
    case CompareType::kF32: static_cast<float*>(data)[i] = __double2float_rn(v); break;
    case CompareType::kF64: static_cast<double*>(data)[i] = v; break;
    case CompareType::kF16: static_cast<uint16_t*>(data)[i] = to_half(__double2float_rn(v)); break;
    case CompareType::kBF16: static_cast<uint16_t*>(data)[i] = to_bf16(__double2float_rn(v)); break;
    case CompareType::kI32: static_cast<int32_t*>(data)[i] = saturate<int32_t>(v, -2147483648.0, 2147483647.0); break;
    case CompareType::kI64:
      static_cast<long long*>(data)[i] = saturate<long long>(v, -9223372036854775808.0, 9223372036854775807.0);
      break;
    case CompareType::kI8: static_cast<int8_t*>(data)[i] = saturate<int8_t>(v, -128.0, 127.0); break;
    case CompareType::kU8: static_cast<uint8_t*>(data)[i] = saturate<uint8_t>(v, 0.0, 255.0); break;
  }
}

// Element i takes draw i of the seed's generator (uniform, int) or is a constant.
__global__ void draw_flat(void* data, CompareType type, size_t n, DrawKind kind, double a, double b, uint64_t seed) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    // SplitMix64::uniform01(): the top 53 bits, exactly.
    const double u = static_cast<double>(nth_draw(seed, i) >> 11) * 0x1.0p-53;
    double v = 0;
    switch (kind) {
      case DrawKind::kUniform: v = __dadd_rn(a, __dmul_rn(__dsub_rn(b, a), u)); break;
      case DrawKind::kInt: v = floor(__dadd_rn(a, __dmul_rn(__dadd_rn(__dsub_rn(b, a), 1.0), u))); break;
      case DrawKind::kOnes: v = 1; break;
      case DrawKind::kNormal:
      case DrawKind::kZeros: v = 0; break;
    }
    store(data, type, i, v);
  }
}

// Elements 2p and 2p + 1 are pair p of normal_pair().
__global__ void draw_normal(void* data, CompareType type, size_t n, uint64_t seed) {
  const size_t pairs = (n + 1) / 2;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t p = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs; p += stride) {
    float x, y;
    normal_pair(seed, p, x, y);
    store(data, type, 2 * p, x);
    if (2 * p + 1 < n) store(data, type, 2 * p + 1, y);
  }
}

template <class T>
__global__ void repeat_kernel(T* data, size_t n, T value) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) data[i] = value;
}

__global__ void differences_kernel(const uint32_t* a, const uint32_t* b, size_t words, const uint8_t* a_tail,
                                   const uint8_t* b_tail, size_t tail, unsigned long long* differing) {
  unsigned long long count = 0;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = first; i < words; i += stride) count += a[i] != b[i];
  if (first < tail) count += a_tail[first] != b_tail[first];
  for (int offset = 16; offset > 0; offset /= 2) count += __shfl_down_sync(0xffffffffu, count, offset);
  if (threadIdx.x % 32 == 0 && count) atomicAdd(differing, count);
}

}  // namespace

cudaError_t draw_on_device(void* data, CompareType type, size_t n, DrawKind kind, double a, double b, uint64_t seed,
                           cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (kind == DrawKind::kNormal) {
    draw_normal<<<blocks_for((n + 1) / 2), kThreads, 0, stream>>>(data, type, n, seed);
  } else {
    draw_flat<<<blocks_for(n), kThreads, 0, stream>>>(data, type, n, kind, a, b, seed);
  }
  return cudaGetLastError();
}

cudaError_t repeat_on_device(void* data, size_t bytes, uint64_t pattern, size_t unit, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  const size_t n = bytes / unit;
  switch (unit) {
    case 1: return cudaMemsetAsync(data, static_cast<int>(pattern & 0xff), bytes, stream);
    case 2:
      repeat_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<uint16_t*>(data), n,
                                                            static_cast<uint16_t>(pattern));
      break;
    case 4:
      repeat_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<uint32_t*>(data), n,
                                                            static_cast<uint32_t>(pattern));
      break;
    case 8: repeat_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<uint64_t*>(data), n, pattern); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t count_differences(const void* a, const void* b, size_t bytes, unsigned long long* differing,
                              cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (reinterpret_cast<uintptr_t>(a) % 4 != 0 || reinterpret_cast<uintptr_t>(b) % 4 != 0) return cudaErrorInvalidValue;
  const size_t words = bytes / 4, tail = bytes % 4;
  const auto* a_tail = static_cast<const uint8_t*>(a) + words * 4;
  const auto* b_tail = static_cast<const uint8_t*>(b) + words * 4;
  differences_kernel<<<blocks_for(words > tail ? words : tail), kThreads, 0, stream>>>(
      static_cast<const uint32_t*>(a), static_cast<const uint32_t*>(b), words, a_tail, b_tail, tail, differing);
  return cudaGetLastError();
}

}  // namespace kiln::cuda
