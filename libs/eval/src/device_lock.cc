#include "kiln/eval/device_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace kiln::eval {

namespace {

// Opens `path` for flock, creating it when missing; -1 (errno set) when neither works.
int open_lock_file(const std::string& path) {
  // Read-only is enough for flock, and works where the file system is mounted read-only for this process.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  return fd;
}

Status lock_file(int fd, int op) {
  while (::flock(fd, op) != 0) {
    if (errno != EINTR) return unavailable(std::string("device lock: flock: ") + std::strerror(errno));
  }
  return Status::ok();
}

}  // namespace

Result<DeviceLock> DeviceLock::open(const std::string& path) {
  DeviceLock lock;
  if (path.empty()) return lock;
  lock.fd_ = open_lock_file(path);
  if (lock.fd_ < 0) return unavailable("device lock " + path + ": " + std::strerror(errno));
  // The turnstile makes the lock fair to a slot waiting to time a case: without it, slots that take turns
  // holding the lock shared could keep it from ever being free. Where it cannot be opened (a read-only
  // folder it was never made in) the lock still excludes alike, only without that fairness.
  lock.turn_fd_ = open_lock_file(path + ".turn");
  return lock;
}

DeviceLock::DeviceLock(DeviceLock&& other) noexcept { *this = std::move(other); }

DeviceLock& DeviceLock::operator=(DeviceLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    if (turn_fd_ >= 0) ::close(turn_fd_);
    fd_ = std::exchange(other.fd_, -1);
    turn_fd_ = std::exchange(other.turn_fd_, -1);
    held_ = std::exchange(other.held_, Mode::kNone);
    held_since_ = other.held_since_;
    for (int m = 0; m < 3; ++m) {
      waited_s_[m] = std::exchange(other.waited_s_[m], 0);
      held_s_[m] = std::exchange(other.held_s_[m], 0);
    }
  }
  return *this;
}

double DeviceLock::held_s(Mode mode) const {
  double s = held_s_[static_cast<int>(mode)];
  if (mode == held_ && mode != Mode::kNone) s += std::chrono::duration<double>(Clock::now() - held_since_).count();
  return s;
}

DeviceLock::~DeviceLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
  if (turn_fd_ >= 0) ::close(turn_fd_);
}

Status DeviceLock::set(Mode mode) {
  if (fd_ < 0 || mode == held_) {
    held_ = fd_ < 0 ? Mode::kNone : mode;
    return Status::ok();
  }
  const auto asked = Clock::now();
  if (held_ != Mode::kNone)
    held_s_[static_cast<int>(held_)] += std::chrono::duration<double>(asked - held_since_).count();
  held_since_ = asked;
  if (mode == Mode::kNone || (mode == Mode::kShared && held_ == Mode::kExclusive)) {
    // Letting go, or giving up exclusivity: never a wait.
    KILN_RETURN_IF_ERROR(lock_file(fd_, mode == Mode::kNone ? LOCK_UN : LOCK_SH));
  } else {
    // Taking the lock goes through the turnstile: a slot waiting for it exclusively holds the turnstile
    // until it has it, so slots asking after it wait their turn instead of overtaking it with shared
    // holds. Shared to exclusive lets go of the shared hold first (flock would anyway, not atomically):
    // held while waiting at the turnstile, it would keep the slot there from ever getting the lock.
    if (held_ != Mode::kNone) {
      KILN_RETURN_IF_ERROR(lock_file(fd_, LOCK_UN));
      held_ = Mode::kNone;
    }
    if (turn_fd_ >= 0) KILN_RETURN_IF_ERROR(lock_file(turn_fd_, LOCK_EX));
    Status taken = lock_file(fd_, mode == Mode::kExclusive ? LOCK_EX : LOCK_SH);
    if (turn_fd_ >= 0) (void)::flock(turn_fd_, LOCK_UN);
    KILN_RETURN_IF_ERROR(taken);
  }
  const auto got = Clock::now();
  waited_s_[static_cast<int>(mode)] += std::chrono::duration<double>(got - asked).count();
  held_ = mode;
  held_since_ = got;
  return Status::ok();
}

Result<DeviceLock::Hold> DeviceLock::hold(Mode mode) {
  const Mode before = held_;
  if (!(mode == Mode::kShared && before == Mode::kExclusive)) KILN_RETURN_IF_ERROR(set(mode));
  return Hold(this, before);
}

DeviceLock::Hold::~Hold() {
  if (lock_ && lock_->held_ != before_) (void)lock_->set(before_);
}

}  // namespace kiln::eval
