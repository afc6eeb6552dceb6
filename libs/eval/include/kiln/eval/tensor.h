// Host tensors of the kernel ABI: allocation, seeded fill, poisoning and comparison; the values a device
// uploads and what it reads back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kernel_abi.h"
#include "kiln/task/task.h"

namespace kiln::eval {

// SplitMix64: small, fast and fully determined by its seed on every platform.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();
  double uniform01();  // [0, 1)
  // Moves on as if next() had been called `draws` times: the generator is a counter, so a tensor's fill
  // can start anywhere in its stream.
  void skip(uint64_t draws);

 private:
  uint64_t state_;
};

uint64_t mix_seed(uint64_t a, uint64_t b);

// Standard normal values 2 * pair and 2 * pair + 1 of the stream `seed`: Marsaglia's polar method (no sine
// or cosine; a quarter of the fill time of Box-Muller) on a generator of the pair's own, so that a fill
// can start at any pair although the method uses a varying number of draws.
std::pair<double, double> normal_pair(uint64_t seed, uint64_t pair);

// The threads the host-side work on a large tensor is spread over (fill, copy, compare): the CPUs this
// process may run on, at most 16. Tensors under a few MiB are done on the calling thread. Results are the
// same for any number of threads, to the bit.
size_t fill_threads();

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);

class HostTensor {
 public:
  HostTensor(task::DType dtype, std::vector<int64_t> shape);
  HostTensor(const HostTensor& other);
  HostTensor& operator=(const HostTensor& other);
  HostTensor(HostTensor&&) noexcept = default;
  HostTensor& operator=(HostTensor&&) noexcept = default;

  task::DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  size_t elements() const { return elements_; }
  size_t bytes() const { return bytes_; }
  void* data() { return buf_.get(); }
  const void* data() const { return buf_.get(); }
  bool is_floating() const;

  double get(size_t i) const;
  void set(size_t i, double v);

  // Values from `init` drawn from a PRNG seeded by `seed`.
  void fill(task::InitKind init, double a, double b, uint64_t seed);
  // Floating tensors become all NaN; integer ones a byte pattern that depends on `variant`, so two
  // poisonings in a row are told apart.
  void poison(int variant);
  bool same_bytes(const HostTensor& other) const;
  void copy_from(const HostTensor& other);
  // The ABI descriptor of this tensor.
  kiln_tensor descriptor();

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  task::DType dtype_;
  std::vector<int64_t> shape_;
  size_t elements_ = 0;
  size_t bytes_ = 0;
  std::unique_ptr<std::byte, Free> buf_;
};

// Element-wise comparison of one output against the reference: |a-r| <= atol + rtol*|r| where r is
// finite (a must be finite too), a must be NaN where r is NaN and equal where r is infinite.
struct Comparison {
  int64_t mismatches = 0;
  int64_t nonfinite = 0;  // a is NaN/Inf where r is finite
  double max_abs_error = 0;
  double max_rel_error = 0;
  std::vector<std::string> first_mismatches;
};

// Adds `from`'s counts and maxima to `into`, and its listed lines while `into` has fewer than `max_listed`.
void merge(const Comparison& from, Comparison& into, size_t max_listed);

// Adds the differences of `got` against `expected` to `acc`; mismatch lines read
// "<name>[<flat index>]: got <a> expected <r> (<context>)".
void compare(const HostTensor& got, const HostTensor& expected, double rtol, double atol, const std::string& name,
             const std::string& context, size_t max_listed, Comparison& acc);

}  // namespace kiln::eval
