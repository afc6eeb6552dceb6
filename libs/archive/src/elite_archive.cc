#include "kiln/archive/archive.h"

#include <algorithm>

namespace kiln::archive {

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
