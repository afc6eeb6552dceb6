#include "kiln/cuda/gpu_claim.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

namespace kiln::cuda {

namespace {

bool plain_name(const std::string& key) {
  if (key.empty() || key.size() > 128) return false;
  for (char c : key) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

GpuClaim::GpuClaim(GpuClaim&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), index_(other.index_), key_(std::move(other.key_)) {}

GpuClaim& GpuClaim::operator=(GpuClaim&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    index_ = other.index_;
    key_ = std::move(other.key_);
  }
  return *this;
}

GpuClaim::~GpuClaim() {
  if (fd_ >= 0) ::close(fd_);
}

Result<GpuClaim> GpuClaim::first_free(const std::string& dir, const std::vector<std::string>& keys) {
  if (keys.empty()) return not_found("gpu claim: no GPU to claim");
  for (const auto& key : keys) {
    if (!plain_name(key)) return invalid_argument("gpu claim: '" + key + "' is not a plain GPU name");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return unavailable("gpu claim: cannot create " + dir + ": " + ec.message());
  for (size_t i = 0; i < keys.size(); ++i) {
    std::string path = dir + "/gpu-" + keys[i] + ".lock";
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return unavailable("gpu claim: cannot open " + path + ": " + std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      GpuClaim claim;
      claim.fd_ = fd;
      claim.index_ = i;
      claim.key_ = keys[i];
      return claim;
    }
    int err = errno;
    ::close(fd);
    if (err != EWOULDBLOCK) return unavailable("gpu claim: cannot lock " + path + ": " + std::strerror(err));
  }
  return resource_exhausted("gpu claim: every GPU (" + std::to_string(keys.size()) +
                            ") is claimed by another tester in " + dir);
}

}  // namespace kiln::cuda
