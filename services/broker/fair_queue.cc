#include "kiln/broker/fair_queue.h"

#include <algorithm>

namespace kiln::broker {

void FairQueue::push(const std::string& job_id, int64_t priority, const std::string& campaign) {
  Level& level = levels_[priority];
  auto& jobs = level.jobs[campaign];
  if (jobs.empty()) level.turns.push_back(campaign);
  jobs.push_back(job_id);
  ++size_;
}

// Round r of a level visits the r-th job of every campaign in turn order; the level ends when a round
// finds none.
void FairQueue::visit(size_t limit, const std::function<bool(int64_t, const std::string&, size_t)>& fn) const {
  size_t seen = 0;
  for (const auto& [priority, level] : levels_) {
    for (size_t round = 0;; ++round) {
      bool any = false;
      for (const auto& campaign : level.turns) {
        const auto& jobs = level.jobs.at(campaign);
        if (round >= jobs.size()) continue;
        any = true;
        if (seen++ >= limit || fn(priority, campaign, round)) return;
      }
      if (!any) break;
    }
  }
}

std::optional<std::string> FairQueue::take(size_t scan, const std::function<bool(const std::string&)>& accept) {
  std::optional<int64_t> found_priority;
  std::string found_campaign;
  size_t found_index = 0;
  visit(scan, [&](int64_t priority, const std::string& campaign, size_t index) {
    if (!accept(levels_.at(priority).jobs.at(campaign)[index])) return false;
    found_priority = priority;
    found_campaign = campaign;
    found_index = index;
    return true;
  });
  if (!found_priority) return std::nullopt;
  auto lit = levels_.find(*found_priority);
  Level& level = lit->second;
  auto& jobs = level.jobs.at(found_campaign);
  std::string id = std::move(jobs[found_index]);
  jobs.erase(jobs.begin() + static_cast<std::ptrdiff_t>(found_index));
  --size_;
  // The campaign served goes to the back of the rotation, or leaves it with nothing left.
  level.turns.erase(std::find(level.turns.begin(), level.turns.end(), found_campaign));
  if (jobs.empty()) {
    level.jobs.erase(found_campaign);
  } else {
    level.turns.push_back(found_campaign);
  }
  if (level.turns.empty()) levels_.erase(lit);
  return id;
}

bool FairQueue::remove(const std::string& job_id, int64_t priority, const std::string& campaign) {
  auto lit = levels_.find(priority);
  if (lit == levels_.end()) return false;
  Level& level = lit->second;
  auto cit = level.jobs.find(campaign);
  if (cit == level.jobs.end()) return false;
  auto& jobs = cit->second;
  auto it = std::find(jobs.begin(), jobs.end(), job_id);
  if (it == jobs.end()) return false;
  jobs.erase(it);
  --size_;
  if (jobs.empty()) {
    level.jobs.erase(cit);
    level.turns.erase(std::find(level.turns.begin(), level.turns.end(), campaign));
    if (level.turns.empty()) levels_.erase(lit);
  }
  return true;
}

std::vector<std::string> FairQueue::take_all() {
  std::vector<std::string> out = peek(size_);
  levels_.clear();
  size_ = 0;
  return out;
}

std::vector<std::string> FairQueue::peek(size_t n) const {
  std::vector<std::string> out;
  visit(n, [&](int64_t priority, const std::string& campaign, size_t index) {
    out.push_back(levels_.at(priority).jobs.at(campaign)[index]);
    return false;
  });
  return out;
}

}  // namespace kiln::broker
