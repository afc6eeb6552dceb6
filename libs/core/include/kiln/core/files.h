// Small filesystem helpers that return Status instead of throwing.
#pragma once

#include <string>

#include "kiln/core/status.h"

namespace kiln {

Result<std::string> read_file(const std::string& path, size_t max_bytes = 64u << 20);
// Writes through a temp file in the same directory, fsync, then rename: readers never see half a file.
Status write_file_atomic(const std::string& path, const std::string& content);
// Writes in place, no fsync: for scratch files that no reader sees half-written and nobody keeps.
Status write_file(const std::string& path, const std::string& content);
Status make_dirs(const std::string& path);

// A temporary directory removed (recursively) when the owner goes out of scope.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "kiln");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace kiln
