#include "kiln/eval/device_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace kiln::eval {

Result<DeviceLock> DeviceLock::open(const std::string& path) {
  DeviceLock lock;
  if (path.empty()) return lock;
  // Read-only is enough for flock, and works where the file system is mounted read-only for this process.
  lock.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (lock.fd_ < 0 && errno == ENOENT) lock.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock.fd_ < 0) return unavailable("device lock " + path + ": " + std::strerror(errno));
  return lock;
}

DeviceLock::DeviceLock(DeviceLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), held_(std::exchange(other.held_, Mode::kNone)) {}

DeviceLock& DeviceLock::operator=(DeviceLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    held_ = std::exchange(other.held_, Mode::kNone);
  }
  return *this;
}

DeviceLock::~DeviceLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

Status DeviceLock::set(Mode mode) {
  if (fd_ < 0 || mode == held_) {
    held_ = fd_ < 0 ? Mode::kNone : mode;
    return Status::ok();
  }
  const int op = mode == Mode::kExclusive ? LOCK_EX : mode == Mode::kShared ? LOCK_SH : LOCK_UN;
  // flock converts a held lock in place (not atomically: another slot may get it in between, which is
  // only a turn taken, never two measurements at once).
  while (::flock(fd_, op) != 0) {
    if (errno != EINTR) return unavailable(std::string("device lock: flock: ") + std::strerror(errno));
  }
  held_ = mode;
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
