#include "kiln/archive/archive.h"

#include <algorithm>

#include "kiln/core/hash.h"

namespace kiln::archive {

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

bool EliteArchive::add(const proto::Program& program) {
  uint64_t order = next_order_++;
  auto same =
      std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.program.id == program.id; });
  if (same != entries_.end()) {
    order = same->order;
    entries_.erase(same);
  }
  auto better = [](const Entry& a, const Entry& b) {
    if (a.program.eval.combined_score != b.program.eval.combined_score)
      return a.program.eval.combined_score > b.program.eval.combined_score;
    return a.order < b.order;
  };
  Entry entry{program, order};
  auto pos = std::upper_bound(entries_.begin(), entries_.end(), entry, better);
  size_t index = static_cast<size_t>(pos - entries_.begin());
  if (index >= options_.capacity) return false;
  entries_.insert(pos, std::move(entry));
  if (entries_.size() > options_.capacity) entries_.pop_back();
  return true;
}

std::optional<proto::Program> EliteArchive::best() const {
  if (entries_.empty()) return std::nullopt;
  return entries_.front().program;
}

std::vector<proto::Program> EliteArchive::elites() const {
  std::vector<proto::Program> out;
  out.reserve(entries_.size());
  for (const auto& e : entries_) out.push_back(e.program);
  return out;
}

std::optional<proto::Program> EliteArchive::select_parent(Rng& rng) const {
  if (entries_.empty()) return std::nullopt;
  // Both draws happen every time so the stream consumed per choice does not depend on the outcome.
  double u = rng.uniform();
  uint64_t pick = rng.below(entries_.size());
  if (u < options_.exploit_ratio) return entries_.front().program;
  return entries_[pick].program;
}

}  // namespace kiln::archive
