#include "kiln/core/random.h"

#include <string>

#include "kiln/core/hash.h"

namespace kiln {

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

uint64_t Rng::below(uint64_t bound) {
  // Rejection sampling: plain modulo would favour small values when bound does not divide 2^64.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x;
  do {
    x = next();
  } while (x >= limit);
  return x % bound;
}

uint64_t seed_from(std::string_view text) {
  const std::string hex = sha256_hex(text);
  uint64_t seed = 0;
  for (size_t i = 0; i < 16; ++i) {
    char ch = hex[i];
    seed = (seed << 4) | static_cast<uint64_t>(ch <= '9' ? ch - '0' : ch - 'a' + 10);
  }
  return seed;
}

}  // namespace kiln
