// Evaluations that share a device take turns on it: a benchmark case is timed with the device's lock held
// exclusively (nothing else runs a kernel there while a contestant is timed), and every other use of the
// device (the CUDA evaluator's start and teardown: contexts, arenas, runners; correctness calls, the check
// after timing, a profiling call) holds it shared, so several evaluation slots overlap their host-side
// work (process start, inputs, comparisons, reports) but never a measurement. The lock is an flock on a
// file that every slot of the device opens, taken through a turnstile (an flock on a second file, held
// only while waiting) so that a slot waiting to time a case is not overtaken by later shared holds; an
// evaluation given no file locks nothing.
#pragma once

#include <chrono>
#include <string>

#include "kiln/core/status.h"

namespace kiln::eval {

class DeviceLock {
 public:
  enum class Mode { kNone, kShared, kExclusive };

  DeviceLock() = default;  // locks nothing
  // The lock on `path` (created when missing); an empty path gives one that locks nothing.
  static Result<DeviceLock> open(const std::string& path);
  DeviceLock(DeviceLock&& other) noexcept;
  DeviceLock& operator=(DeviceLock&& other) noexcept;
  DeviceLock(const DeviceLock&) = delete;
  DeviceLock& operator=(const DeviceLock&) = delete;
  ~DeviceLock();

  bool active() const { return fd_ >= 0; }
  Mode held() const { return held_; }
  // Where this evaluation's time on the device went (an active lock only): seconds spent waiting to
  // hold the lock in `mode`, and seconds it was held in `mode` (up to now for the mode held now).
  double waited_s(Mode mode) const { return waited_s_[static_cast<int>(mode)]; }
  double held_s(Mode mode) const;

  // Holds the lock in `mode` until the Hold ends (waiting for it). Inside an exclusive hold a shared one
  // holds nothing more (the exclusive lock covers it); the hold ends by going back to what was held before.
  class Hold {
   public:
    Hold(Hold&& other) noexcept : lock_(other.lock_), before_(other.before_) { other.lock_ = nullptr; }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    Hold& operator=(Hold&&) = delete;
    ~Hold();

   private:
    friend class DeviceLock;
    Hold(DeviceLock* lock, Mode before) : lock_(lock), before_(before) {}
    DeviceLock* lock_;
    Mode before_;
  };
  Result<Hold> hold(Mode mode);

 private:
  using Clock = std::chrono::steady_clock;
  Status set(Mode mode);
  int fd_ = -1;       // the lock: <path>
  int turn_fd_ = -1;  // its turnstile: <path>.turn (-1: none, the lock is then not fair)
  Mode held_ = Mode::kNone;
  Clock::time_point held_since_{};
  double waited_s_[3] = {0, 0, 0};
  double held_s_[3] = {0, 0, 0};
};

}  // namespace kiln::eval
