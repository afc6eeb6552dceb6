// Loading a task package into memory from a directory, a .tar.gz or a .zip, with bounds and path checks: a
// package comes from users (and over the wire), so nothing in it may point outside itself or be large
// enough to hurt the process reading it.
#include "kiln/task/task.h"

#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <filesystem>
#include <memory>

#include "kiln/core/files.h"
#include "paths.h"

namespace kiln::task {

namespace fs = std::filesystem;
using detail::path_components;

namespace {

// A task package is a handful of source files; these bounds are far above any real one and far below
// what could strain a worker that holds the package in every message.
constexpr size_t kMaxPackageBytes = 16u << 20;
constexpr size_t kMaxPackageFiles = 256;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string join(const std::vector<std::string>& parts, size_t from = 0) {
  std::string out;
  for (size_t i = from; i < parts.size(); ++i) {
    if (!out.empty()) out.push_back('/');
    out += parts[i];
  }
  return out;
}

// Hidden files (editor backups, .git, macOS "._" companions) are not part of a package.
bool is_hidden(const std::vector<std::string>& parts) {
  for (const auto& p : parts)
    if (p.starts_with(".")) return true;
  return false;
}

class Budget {
 public:
  Status add_file(const std::string& name, size_t bytes) {
    if (++files_ > kMaxPackageFiles)
      return resource_exhausted(name + ": package has more than " + std::to_string(kMaxPackageFiles) + " files");
    return add_bytes(name, bytes);
  }
  Status add_bytes(const std::string& name, size_t bytes) {
    bytes_ += bytes;
    if (bytes_ > kMaxPackageBytes)
      return resource_exhausted(name + ": package is larger than " + std::to_string(kMaxPackageBytes >> 20) + " MiB");
    return Status::ok();
  }

 private:
  size_t files_ = 0;
  size_t bytes_ = 0;
};

Result<proto::FileMap> load_directory(const fs::path& root) {
  std::error_code ec;
  fs::path canonical_root = fs::canonical(root, ec);
  if (ec) return not_found(root.string() + ": " + ec.message());
  proto::FileMap files;
  Budget budget;
  fs::recursive_directory_iterator it(canonical_root, fs::directory_options::none, ec);
  if (ec) return unavailable(root.string() + ": cannot list: " + ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return unavailable(root.string() + ": cannot list: " + ec.message());
    const fs::directory_entry& entry = *it;
    std::string rel = entry.path().lexically_relative(canonical_root).generic_string();
    KILN_ASSIGN_OR_RETURN(std::vector<std::string> parts, path_components(rel));
    if (is_hidden(parts)) {
      if (entry.is_directory(ec) && !entry.is_symlink(ec)) it.disable_recursion_pending();
      continue;
    }
    fs::path source = entry.path();
    if (entry.is_symlink(ec)) {
      // A link is read only when it resolves to a regular file inside the package.
      fs::path target = fs::weakly_canonical(entry.path(), ec);
      std::string target_rel = ec ? std::string("..") : target.lexically_relative(canonical_root).generic_string();
      if (target_rel.empty() || target_rel.starts_with(".."))
        return invalid_argument(rel + ": symlink points outside the package");
      if (!fs::is_regular_file(target, ec)) return invalid_argument(rel + ": symlink does not point to a regular file");
      source = target;
    } else if (entry.is_directory(ec)) {
      continue;
    } else if (!entry.is_regular_file(ec)) {
      return invalid_argument(rel + ": not a regular file");
    }
    size_t size = fs::file_size(source, ec);
    if (ec) return unavailable(rel + ": " + ec.message());
    KILN_RETURN_IF_ERROR(budget.add_file(rel, size));
    KILN_ASSIGN_OR_RETURN(std::string content, read_file(source.string(), kMaxPackageBytes));
    files[join(parts)] = proto::Bytes{std::move(content)};
  }
  return files;
}

struct ArchiveCloser {
  void operator()(archive* a) const { archive_read_free(a); }
};
using ArchivePtr = std::unique_ptr<archive, ArchiveCloser>;

enum class ArchiveKind { kTarGz, kZip };

// A .tar.gz or a .zip, read with the same path, link and size rules. A zip is read through its central
// directory (the seekable reader), the index unzip tools trust, not the local headers a crafted file can
// make disagree with it.
Result<proto::FileMap> load_archive(const std::string& path, ArchiveKind kind) {
  ArchivePtr a(archive_read_new());
  if (!a) return internal_error("libarchive: cannot allocate a reader");
  const char* what = ".tar.gz";
  if (kind == ArchiveKind::kZip) {
    archive_read_support_format_zip_seekable(a.get());
    what = ".zip";
  } else {
    archive_read_support_filter_gzip(a.get());
    archive_read_support_format_tar(a.get());
  }
  constexpr size_t kBlockBytes = 10240;
  if (archive_read_open_filename(a.get(), path.c_str(), kBlockBytes) != ARCHIVE_OK)
    return invalid_argument(path + ": cannot open as " + what + ": " + archive_error_string(a.get()));

  // Read with the archive's own paths first; the shared top-level folder is stripped afterwards.
  std::vector<std::pair<std::vector<std::string>, std::string>> entries;
  Budget budget;
  archive_entry* entry = nullptr;
  for (;;) {
    int rc = archive_read_next_header(a.get(), &entry);
    if (rc == ARCHIVE_EOF) break;
    if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN)
      return invalid_argument(path + ": corrupt archive: " + archive_error_string(a.get()));
    const char* raw_name = archive_entry_pathname(entry);
    std::string name = raw_name ? raw_name : "";
    KILN_ASSIGN_OR_RETURN(std::vector<std::string> parts, path_components(name));
    auto type = archive_entry_filetype(entry);
    if (type == AE_IFDIR || parts.empty()) continue;
    if (is_hidden(parts)) continue;
    if (archive_entry_hardlink(entry) != nullptr || type == AE_IFLNK)
      return invalid_argument(name + ": links are not allowed in a package archive");
    if (type != AE_IFREG) return invalid_argument(name + ": not a regular file");
    if (archive_entry_size_is_set(entry)) {
      auto declared = archive_entry_size(entry);
      if (declared < 0) return invalid_argument(name + ": negative size in archive");
      KILN_RETURN_IF_ERROR(budget.add_file(name, static_cast<size_t>(declared)));
    } else {
      KILN_RETURN_IF_ERROR(budget.add_file(name, 0));
    }
    std::string content;
    char buf[16384];
    for (;;) {
      la_ssize_t n = archive_read_data(a.get(), buf, sizeof buf);
      if (n < 0) return invalid_argument(name + ": corrupt archive: " + archive_error_string(a.get()));
      if (n == 0) break;
      content.append(buf, static_cast<size_t>(n));
      // The declared size may lie; the bytes actually read are what count.
      if (content.size() > kMaxPackageBytes)
        return resource_exhausted(name + ": package is larger than " + std::to_string(kMaxPackageBytes >> 20) + " MiB");
    }
    if (!archive_entry_size_is_set(entry)) KILN_RETURN_IF_ERROR(budget.add_bytes(name, content.size()));
    entries.emplace_back(std::move(parts), std::move(content));
  }

  // "rmsnorm/task.yaml", "rmsnorm/kernel.cu" -> "task.yaml", "kernel.cu".
  bool strip = !entries.empty();
  for (const auto& [parts, content] : entries)
    if (parts.size() < 2 || parts[0] != entries.front().first[0]) strip = false;
  proto::FileMap files;
  for (auto& [parts, content] : entries) {
    std::string key = join(parts, strip ? 1 : 0);
    if (files.count(key)) return invalid_argument(key + ": appears twice in the archive");
    files[key] = proto::Bytes{std::move(content)};
  }
  return files;
}

}  // namespace

namespace detail {

Result<std::vector<std::string>> path_components(std::string_view path) {
  if (path.starts_with("/")) return invalid_argument(std::string(path) + ": absolute path in package");
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string_view::npos) slash = path.size();
    std::string_view part = path.substr(pos, slash - pos);
    if (part == "..") return invalid_argument(std::string(path) + ": path escapes the package (\"..\")");
    if (!part.empty() && part != ".") parts.emplace_back(part);
    pos = slash + 1;
  }
  return parts;
}

}  // namespace detail

Result<proto::FileMap> load_package(const std::string& path) {
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return not_found(path + ": no such file or directory");
  Result<proto::FileMap> files =
      fs::is_directory(st)                                      ? load_directory(path)
      : (ends_with(path, ".tar.gz") || ends_with(path, ".tgz")) ? load_archive(path, ArchiveKind::kTarGz)
      : ends_with(path, ".zip")                                 ? load_archive(path, ArchiveKind::kZip)
                                                                : Result<proto::FileMap>(invalid_argument(
                                                                      path + ": expected a package directory, or a .tar.gz or .zip of one"));
  if (!files.is_ok()) return files;
  if (files->empty()) return invalid_argument(path + ": the package is empty");
  return files;
}

std::vector<std::string> package_dirs(const std::string& root, proto::Backend backend) {
  std::vector<std::string> dirs;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    if (!e.is_directory() || !std::filesystem::exists(e.path() / "task.yaml")) continue;
    auto files = load_package(e.path().string());
    if (!files.is_ok()) continue;
    auto spec = parse_task(*files);
    if (spec.is_ok() && spec->backend == backend) dirs.push_back(e.path().string());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

}  // namespace kiln::task
