#include "kiln/eval/tensor.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <system_error>
#include <thread>

namespace kiln::eval {
namespace {

constexpr size_t kAlignment = 64;  // a cache line; also enough for any SIMD load a kernel may use

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

template <class T>
T load(const std::byte* base, size_t i) {
  T v;
  std::memcpy(&v, base + i * sizeof(T), sizeof(T));
  return v;
}
template <class T>
void store(std::byte* base, size_t i, T v) {
  std::memcpy(base + i * sizeof(T), &v, sizeof(T));
}

template <class T>
T saturate(double v) {
  if (std::isnan(v)) return 0;
  double r = std::nearbyint(v);
  r = std::clamp(r, static_cast<double>(std::numeric_limits<T>::lowest()),
                 static_cast<double>(std::numeric_limits<T>::max()));
  return static_cast<T>(r);
}

std::string format_value(double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// Work on fewer elements than this stays on the calling thread (starting threads would cost more).
constexpr size_t kParallelElements = size_t{1} << 20;
constexpr size_t kMaxThreads = 16;

// Runs f(chunk, begin, end) over [0, n) in `chunks` pieces whose starts are multiples of `align`, the
// first on the calling thread; a thread that cannot be started runs its piece here instead.
template <class F>
void for_chunks(size_t n, size_t chunks, size_t align, F&& f) {
  const size_t per = std::max<size_t>(((n + chunks - 1) / chunks + align - 1) / align * align, 1);
  std::vector<std::thread> threads;
  std::vector<std::pair<size_t, size_t>> inline_too;
  for (size_t c = 1; c < chunks; ++c) {
    const size_t begin = std::min(n, c * per), end = std::min(n, (c + 1) * per);
    if (begin >= end) break;
    try {
      threads.emplace_back([&f, c, begin, end] { f(c, begin, end); });
    } catch (const std::system_error&) {
      inline_too.emplace_back(c, begin);
    }
  }
  f(0, 0, std::min(n, per));
  for (auto [c, begin] : inline_too) f(c, begin, std::min(n, (c + 1) * per));
  for (auto& t : threads) t.join();
}

size_t chunks_for(size_t elements) { return elements < kParallelElements ? 1 : fill_threads(); }

}  // namespace

size_t fill_threads() {
  static const size_t threads = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    size_t n = sched_getaffinity(0, sizeof set, &set) == 0 ? static_cast<size_t>(CPU_COUNT(&set)) : 0;
    if (n == 0) n = std::thread::hardware_concurrency();
    return std::clamp<size_t>(n, 1, kMaxThreads);
  }();
  return threads;
}

uint64_t SplitMix64::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void SplitMix64::skip(uint64_t draws) { state_ += draws * 0x9E3779B97F4A7C15ull; }

double SplitMix64::uniform01() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

std::pair<double, double> normal_pair(uint64_t seed, uint64_t pair) {
  SplitMix64 rng(mix_seed(seed, pair));
  for (;;) {
    // Both coordinates from one draw, in single precision (what an fp32 tensor keeps of them anyway).
    const uint64_t bits = rng.next();
    const float u = static_cast<float>(bits >> 40) * 0x1.0p-23f - 1;
    const float v = static_cast<float>((bits >> 16) & 0xFFFFFF) * 0x1.0p-23f - 1;
    const float s = u * u + v * v;
    if (s >= 1 || s == 0) continue;  // outside the unit disc (about one draw in five) or its centre
    const float f = std::sqrt(-2 * std::log(s) / s);
    return {static_cast<double>(u * f), static_cast<double>(v * f)};
  }
}

uint64_t mix_seed(uint64_t a, uint64_t b) {
  SplitMix64 g(a * 0x100000001B3ull ^ (b + 0x9E3779B97F4A7C15ull));
  return g.next();
}

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

uint16_t float_to_half(float f) {
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
  int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    int shift = 14 - e;
    uint32_t half_mant = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
    return static_cast<uint16_t>(sign | half_mant);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // a carry rounds up into the exponent
  return static_cast<uint16_t>(half);
}

float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

uint16_t float_to_bf16(float f) {
  uint32_t x = float_bits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

HostTensor::HostTensor(task::DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
  elements_ = 1;
  for (int64_t d : shape_) elements_ *= static_cast<size_t>(std::max<int64_t>(d, 0));
  bytes_ = elements_ * task::dtype_bytes(dtype_);
  size_t alloc = std::max(kAlignment, (bytes_ + kAlignment - 1) / kAlignment * kAlignment);
  void* p = std::aligned_alloc(kAlignment, alloc);
  if (!p) throw std::bad_alloc();
  buf_.reset(static_cast<std::byte*>(p));
}

HostTensor::HostTensor(const HostTensor& other) : HostTensor(other.dtype_, other.shape_) { copy_from(other); }

HostTensor& HostTensor::operator=(const HostTensor& other) {
  // Always into fresh memory: this tensor's pages may be shared copy-on-write with a process forked since
  // (a CPU runner), and writing over them would copy each one first.
  if (this != &other) *this = HostTensor(other);
  return *this;
}

bool HostTensor::is_floating() const {
  switch (dtype_) {
    case task::DType::kF32:
    case task::DType::kF64:
    case task::DType::kF16:
    case task::DType::kBF16: return true;
    default: return false;
  }
}

double HostTensor::get(size_t i) const {
  const std::byte* b = buf_.get();
  switch (dtype_) {
    case task::DType::kF32: return load<float>(b, i);
    case task::DType::kF64: return load<double>(b, i);
    case task::DType::kF16: return half_to_float(load<uint16_t>(b, i));
    case task::DType::kBF16: return bf16_to_float(load<uint16_t>(b, i));
    case task::DType::kI32: return load<int32_t>(b, i);
    case task::DType::kI64: return static_cast<double>(load<int64_t>(b, i));
    case task::DType::kI8: return load<int8_t>(b, i);
    case task::DType::kU8: return load<uint8_t>(b, i);
  }
  return 0;
}

void HostTensor::set(size_t i, double v) {
  std::byte* b = buf_.get();
  switch (dtype_) {
    case task::DType::kF32: store<float>(b, i, static_cast<float>(v)); break;
    case task::DType::kF64: store<double>(b, i, v); break;
    case task::DType::kF16: store<uint16_t>(b, i, float_to_half(static_cast<float>(v))); break;
    case task::DType::kBF16: store<uint16_t>(b, i, float_to_bf16(static_cast<float>(v))); break;
    case task::DType::kI32: store<int32_t>(b, i, saturate<int32_t>(v)); break;
    case task::DType::kI64: store<int64_t>(b, i, saturate<int64_t>(v)); break;
    case task::DType::kI8: store<int8_t>(b, i, saturate<int8_t>(v)); break;
    case task::DType::kU8: store<uint8_t>(b, i, saturate<uint8_t>(v)); break;
  }
}

void HostTensor::fill(task::InitKind init, double a, double b, uint64_t seed) {
  // Element i takes draw i (uniform, int), or (normal) the pair i/2 of normal_pair(), the first value to
  // the even element and the second to the odd one. Pieces start at even elements, so each can position
  // its own generator, and the values are those of one pass from the start.
  float* const f32 = dtype_ == task::DType::kF32 ? reinterpret_cast<float*>(buf_.get()) : nullptr;
  auto put = [&](size_t i, double v) {
    if (f32)
      f32[i] = static_cast<float>(v);
    else
      set(i, v);
  };
  for_chunks(elements_, chunks_for(elements_), 2, [&](size_t, size_t begin, size_t end) {
    if (init == task::InitKind::kNormal) {
      for (size_t i = begin; i < end; i += 2) {
        const auto [x, y] = normal_pair(seed, i / 2);
        put(i, x);
        if (i + 1 < end) put(i + 1, y);
      }
      return;
    }
    SplitMix64 rng(seed);
    rng.skip(begin);
    for (size_t i = begin; i < end; ++i) {
      double v = 0;
      switch (init) {
        case task::InitKind::kUniform: v = a + (b - a) * rng.uniform01(); break;
        case task::InitKind::kInt: v = std::floor(a + (b - a + 1) * rng.uniform01()); break;
        case task::InitKind::kOnes: v = 1; break;
        case task::InitKind::kNormal:
        case task::InitKind::kZeros: v = 0; break;
      }
      put(i, v);
    }
  });
}

void HostTensor::poison(int variant) {
  if (!is_floating()) {
    std::memset(buf_.get(), variant % 2 == 0 ? 0xA5 : 0x5A, bytes_);
    return;
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (dtype_ == task::DType::kF32) {
    float* f = reinterpret_cast<float*>(buf_.get());
    std::fill(f, f + elements_, static_cast<float>(nan));
    return;
  }
  for (size_t i = 0; i < elements_; ++i) set(i, nan);
}

bool HostTensor::same_bytes(const HostTensor& other) const {
  return bytes_ == other.bytes_ && std::memcmp(buf_.get(), other.buf_.get(), bytes_) == 0;
}

void HostTensor::copy_from(const HostTensor& other) {
  if (other.bytes_ != bytes_) throw std::logic_error("HostTensor::copy_from: size differs");
  std::byte* to = buf_.get();
  const std::byte* from = other.buf_.get();
  for_chunks(bytes_, chunks_for(bytes_ / 4), 4096,
             [&](size_t, size_t begin, size_t end) { std::memcpy(to + begin, from + begin, end - begin); });
}

kiln_tensor HostTensor::descriptor() {
  kiln_tensor t{};
  t.data = buf_.get();
  t.dtype = static_cast<int32_t>(dtype_);
  t.ndim = static_cast<int32_t>(shape_.size());
  for (size_t d = 0; d < shape_.size() && d < KILN_MAX_DIMS; ++d) t.shape[d] = shape_[d];
  return t;
}

namespace {

// What one piece of a comparison found; pieces are merged in order, so the result is that of one pass.
template <class Got, class Expected>
void compare_range(Got got_at, Expected expected_at, size_t begin, size_t end, double rtol, double atol,
                   const std::string& name, const std::string& context, size_t max_listed, Comparison& p) {
  for (size_t i = begin; i < end; ++i) {
    const double a = got_at(i);
    const double r = expected_at(i);
    bool ok;
    if (std::isfinite(r)) {
      if (!std::isfinite(a)) {
        ok = false;
        ++p.nonfinite;
      } else {
        const double abs_err = std::fabs(a - r);
        p.max_abs_error = std::max(p.max_abs_error, abs_err);
        if (r != 0) p.max_rel_error = std::max(p.max_rel_error, abs_err / std::fabs(r));
        ok = abs_err <= atol + rtol * std::fabs(r);
      }
    } else if (std::isnan(r)) {
      ok = std::isnan(a);
    } else {
      ok = a == r;
    }
    if (ok) continue;
    ++p.mismatches;
    if (p.first_mismatches.size() < max_listed) {
      p.first_mismatches.push_back(name + "[" + std::to_string(i) + "]: got " + format_value(a) + " expected " +
                                   format_value(r) + " (" + context + ")");
    }
  }
}

}  // namespace

void compare(const HostTensor& got, const HostTensor& expected, double rtol, double atol, const std::string& name,
             const std::string& context, size_t max_listed, Comparison& acc) {
  const size_t n = std::min(got.elements(), expected.elements());
  const size_t room = max_listed > acc.first_mismatches.size() ? max_listed - acc.first_mismatches.size() : 0;
  const bool f32 = got.dtype() == task::DType::kF32 && expected.dtype() == task::DType::kF32;
  const auto* g32 = static_cast<const float*>(got.data());
  const auto* e32 = static_cast<const float*>(expected.data());
  const size_t chunks = chunks_for(n);
  std::vector<Comparison> parts(chunks);
  for_chunks(n, chunks, 1, [&](size_t c, size_t begin, size_t end) {
    if (f32) {
      compare_range([g32](size_t i) { return static_cast<double>(g32[i]); },
                    [e32](size_t i) { return static_cast<double>(e32[i]); }, begin, end, rtol, atol, name, context,
                    room, parts[c]);
    } else {
      compare_range([&got](size_t i) { return got.get(i); }, [&expected](size_t i) { return expected.get(i); }, begin,
                    end, rtol, atol, name, context, room, parts[c]);
    }
  });
  for (const auto& p : parts) merge(p, acc, max_listed);
}

void merge(const Comparison& from, Comparison& into, size_t max_listed) {
  into.mismatches += from.mismatches;
  into.nonfinite += from.nonfinite;
  into.max_abs_error = std::max(into.max_abs_error, from.max_abs_error);
  into.max_rel_error = std::max(into.max_rel_error, from.max_rel_error);
  for (const auto& line : from.first_mismatches) {
    if (into.first_mismatches.size() >= max_listed) break;
    into.first_mismatches.push_back(line);
  }
}

}  // namespace kiln::eval
