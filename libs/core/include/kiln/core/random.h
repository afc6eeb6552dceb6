// Randomness that replays: the same sequence on every platform and standard library, which
// std::uniform_*_distribution does not promise. A campaign's parent choices and the tuner's order of
// parameter combinations are drawn from it, so a restarted scorer or another bridge replica draws the same.
#pragma once

#include <cstdint>
#include <string_view>

namespace kiln {

// splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  double uniform();                // [0, 1)
  uint64_t below(uint64_t bound);  // [0, bound); bound > 0

 private:
  uint64_t state_;
};

// A seed from text (the first 8 bytes of its sha256, big-endian), e.g. "<campaign_id>#<proposal_index>".
uint64_t seed_from(std::string_view text);

}  // namespace kiln
