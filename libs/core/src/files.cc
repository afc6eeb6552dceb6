#include "kiln/core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kiln {

namespace fs = std::filesystem;

Result<std::string> read_file(const std::string& path, size_t max_bytes) {
  std::error_code ec;
  auto size = fs::file_size(path, ec);
  if (ec) return not_found(path + ": " + ec.message());
  if (size > max_bytes)
    return resource_exhausted(path + ": file is " + std::to_string(size) + " bytes, limit " +
                              std::to_string(max_bytes));
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status write_file(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return unavailable(path + ": cannot create: " + std::strerror(errno));
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  out.close();
  if (!out) return unavailable(path + ": write failed");
  return Status::ok();
}

Status write_file_atomic(const std::string& path, const std::string& content) {
  fs::path target(path);
  std::string tmp = (target.parent_path() / ("." + target.filename().string() + ".tmpXXXXXX")).string();
  int fd = mkstemp(tmp.data());
  if (fd < 0) return unavailable(path + ": cannot create temp file: " + std::strerror(errno));
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = ::write(fd, content.data() + off, content.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return unavailable(path + ": write failed: " + std::strerror(e));
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return unavailable(path + ": fsync failed: " + std::strerror(errno));
  }
  ::chmod(tmp.c_str(), 0644);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return unavailable(path + ": rename failed: " + std::strerror(e));
  }
  // Make the rename itself durable.
  int dfd = ::open(target.parent_path().empty() ? "." : target.parent_path().c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::ok();
}

Status make_dirs(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return unavailable(path + ": cannot create directory: " + ec.message());
  return Status::ok();
}

TempDir::TempDir(const std::string& prefix) {
  std::string tmpl = (fs::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

}  // namespace kiln
