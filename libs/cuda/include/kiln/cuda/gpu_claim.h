#pragma once
// GPU claims: testers on one host that share a folder serve distinct GPUs without being told which. Each
// holds an flock on <dir>/gpu-<key>.lock for the GPU it serves; the lock lives as long as the process, so a
// tester that dies (even by SIGKILL) frees its GPU for its restart or another tester.

#include <string>
#include <vector>

#include "kiln/core/status.h"

namespace kiln::cuda {

class GpuClaim {
 public:
  GpuClaim() = default;
  GpuClaim(GpuClaim&& other) noexcept;
  GpuClaim& operator=(GpuClaim&& other) noexcept;
  GpuClaim(const GpuClaim&) = delete;
  GpuClaim& operator=(const GpuClaim&) = delete;
  ~GpuClaim();

  // The first of `keys` (GPU uuids, in order) whose lock in `dir` no one holds; the folder is created when
  // missing. kResourceExhausted when every key is held, kInvalidArgument for a key that is not a plain name.
  static Result<GpuClaim> first_free(const std::string& dir, const std::vector<std::string>& keys);

  bool held() const { return fd_ >= 0; }
  size_t index() const { return index_; }  // into `keys`
  const std::string& key() const { return key_; }

 private:
  int fd_ = -1;
  size_t index_ = 0;
  std::string key_;
};

}  // namespace kiln::cuda
