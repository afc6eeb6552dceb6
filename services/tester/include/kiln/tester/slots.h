// A tester's evaluation slots (tester.slots): evaluations at once on one device, each on cores of its own.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::tester {

// `cores` split into `slots` groups of consecutive cores, sizes differing by at most one: the cores of each
// evaluation slot, so that one slot's host threads do not compete with another's timing thread. Empty when
// there are fewer cores than slots (then no slot is pinned).
std::vector<std::vector<int>> split_cores(const std::vector<int>& cores, int64_t slots);

// The OpenMP settings every contestant of a CPU evaluation runs under (candidate, reference and baselines
// alike): idle threads sleep instead of spinning (a spinning team of a stopped runner, or of a kernel on a
// loaded host, takes the cores the timed call needs), and with `cores` given, one thread per core, bound
// to those cores.
std::vector<std::string> openmp_env(const std::vector<int>& cores);

// Which slots are taken, and each one's cores. Thread-safe.
class Slots {
 public:
  // `count` slots (none with fewer than 2: one evaluation at a time needs no slot), on `cores` split by
  // split_cores.
  Slots(int64_t count, const std::vector<int>& cores);
  // A free slot for one evaluation, or -1; give it back with give().
  int take();
  void give(int slot);
  // Slot `slot`'s cores; empty for -1 or when there were too few cores to split.
  const std::vector<int>& cores(int slot) const;

 private:
  std::mutex mu_;
  std::vector<bool> taken_;
  std::vector<std::vector<int>> cores_;
};

// A slot taken for one evaluation and given back when it ends.
class SlotHold {
 public:
  explicit SlotHold(Slots& slots) : slots_(slots), slot_(slots.take()) {}
  ~SlotHold() { slots_.give(slot_); }
  SlotHold(const SlotHold&) = delete;
  SlotHold& operator=(const SlotHold&) = delete;
  int slot() const { return slot_; }

 private:
  Slots& slots_;
  int slot_;
};

}  // namespace kiln::tester
