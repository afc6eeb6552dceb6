// The queued jobs of one service, in the order they are handed out (DESIGN §2, docs/operations.md):
//   1. a higher priority first (SUBMIT's `priority`, inherited by every follow-up; 0 by default);
//   2. within one priority, campaigns take turns: one job of each campaign that has one queued, in the
//      order the campaigns joined the rotation; a campaign that got a job goes to the back;
//   3. within one campaign, first in, first out.
// Jobs that name no campaign form one group of their own, so a queue of such jobs alone is FIFO, as
// before campaigns were known to the broker.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln::broker {

class FairQueue {
 public:
  void push(const std::string& job_id, int64_t priority, const std::string& campaign);
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // Takes the first job, in hand-out order among the first `scan` of them, that `accept` takes (it may
  // also see ids of jobs that are gone, and may accept them so they are dropped); nullopt when none.
  std::optional<std::string> take(size_t scan, const std::function<bool(const std::string&)>& accept);
  // Removes one job, queued with `priority` and `campaign`, keeping everyone's turn; false when absent.
  bool remove(const std::string& job_id, int64_t priority, const std::string& campaign);
  // Empties the queue, in hand-out order.
  std::vector<std::string> take_all();
  // The first `n` ids in hand-out order, without taking them.
  std::vector<std::string> peek(size_t n) const;

 private:
  struct Level {
    std::map<std::string, std::deque<std::string>> jobs;  // by campaign
    std::deque<std::string> turns;                        // campaigns with queued jobs, next first
  };
  // Visits ids in hand-out order until `visit` returns true or `limit` were seen.
  void visit(size_t limit, const std::function<bool(int64_t, const std::string&, size_t)>& fn) const;

  std::map<int64_t, Level, std::greater<>> levels_;
  size_t size_ = 0;
};

}  // namespace kiln::broker
