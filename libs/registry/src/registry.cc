#include "kiln/registry/registry.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "kiln/core/files.h"
#include "kiln/core/hash.h"
#include "kiln/proto/ids.h"
#include "promotion.h"

namespace kiln::registry {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::string_view kLockFile = ".lock";
constexpr std::string_view kKernelsDir = "kernels";
constexpr size_t kMaxRegistryBytes = 256u << 20;

// The registry file as stored: entries kept as raw JSON so a rewrite preserves keys this version does
// not know, plus their parsed form for the checks.
struct Loaded {
  json raw = json::array();
  std::vector<KernelEntry> entries;
};

Result<Loaded> load(const std::string& dir) {
  std::string path = dir + "/" + std::string(kRegistryFile);
  Loaded out;
  std::error_code ec;
  if (!fs::exists(path, ec)) return out;
  KILN_ASSIGN_OR_RETURN(std::string text, read_file(path, kMaxRegistryBytes));
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  const std::string file(kRegistryFile);
  if (doc.is_discarded()) return internal_error(file + ": not valid JSON");
  if (!doc.is_object() || !doc.contains("kernels") || !doc["kernels"].is_array())
    return internal_error(file + ": expected {\"kernels\": [...]}");
  out.raw = doc["kernels"];
  for (size_t i = 0; i < out.raw.size(); ++i) {
    auto entry = from_json(out.raw[i]);
    if (!entry.is_ok())
      return internal_error(file + ": kernels[" + std::to_string(i) + "]." + entry.status().message());
    out.entries.push_back(std::move(entry).value());
  }
  return out;
}

// ------------------------------------------------------------------------------ writing

// An exclusive flock held for the life of the object: the registry has a single writer at a time,
// across threads (each opens its own description) and processes.
class FileLock {
 public:
  static Result<FileLock> acquire(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return unavailable(path + ": cannot open lock file: " + std::strerror(errno));
    while (::flock(fd, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      return unavailable(path + ": cannot lock: " + std::strerror(e));
    }
    return FileLock(fd);
  }
  FileLock(FileLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  FileLock& operator=(FileLock&&) = delete;
  FileLock(const FileLock&) = delete;
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
  }

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// A source path stored in the registry must stay inside it.
bool is_safe_relative(const std::string& p) {
  if (p.empty() || p.front() == '/') return false;
  for (const auto& part : fs::path(p))
    if (part == "..") return false;
  return true;
}

}  // namespace

std::string shape_slug(const std::map<std::string, int64_t>& shape) {
  static const std::map<std::string, std::string> kPrefixes{
      {"hidden_size", "h"}, {"batch", "b"}, {"seq_len", "s"}, {"heads", "n"}};
  std::map<std::string, int64_t> lowered;
  for (const auto& [k, v] : shape) {
    std::string l;
    for (char c : k) l.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    lowered[l] = v;
  }
  std::string out;
  for (const auto& [k, v] : lowered) {
    auto known = kPrefixes.find(k);
    std::string prefix;
    if (known != kPrefixes.end()) {
      prefix = known->second;
    } else {
      for (char c : k)
        if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) prefix.push_back(c);
    }
    if (!out.empty()) out.push_back('_');
    out += prefix + std::to_string(v);
  }
  return out.empty() ? "noshape" : out;
}

std::string kernel_id(std::string_view language, std::string_view op, std::string_view gpu, std::string_view dtype,
                      const std::map<std::string, int64_t>& shape, const std::set<std::string>& existing) {
  std::string base = std::string(language) + "_" + std::string(op) + "_" + gpu_slug(gpu) + "_" + std::string(dtype) +
                     "_" + shape_slug(shape) + "_v";
  for (int64_t n = 1;; ++n) {
    std::string id = base + std::to_string(n);
    if (!existing.count(id)) return id;
  }
}

Result<Registry> Registry::open(const std::string& dir) {
  if (dir.empty()) return invalid_argument("registry: empty directory name");
  std::error_code ec;
  fs::path abs = fs::absolute(dir, ec);
  if (ec) return invalid_argument(dir + ": " + ec.message());
  if (fs::exists(abs, ec) && !fs::is_directory(abs, ec)) return invalid_argument(dir + ": not a directory");
  return Registry(abs.lexically_normal().string());
}

Result<std::vector<KernelEntry>> Registry::list() const {
  KILN_ASSIGN_OR_RETURN(Loaded loaded, load(dir_));
  return std::move(loaded.entries);
}

Result<json> Registry::raw_entries() const {
  KILN_ASSIGN_OR_RETURN(Loaded loaded, load(dir_));
  return std::move(loaded.raw);
}

Result<KernelEntry> Registry::show(const std::string& id) const {
  KILN_ASSIGN_OR_RETURN(std::vector<KernelEntry> entries, list());
  for (auto& e : entries)
    if (e.kernel_id == id) return std::move(e);
  return not_found("no kernel " + id + " in " + dir_);
}

Status Registry::verify(std::vector<std::string>* warnings) const {
  KILN_ASSIGN_OR_RETURN(std::vector<KernelEntry> entries, list());
  std::vector<std::string> problems;
  std::set<std::string> ids;
  for (const KernelEntry& e : entries) {
    auto problem = [&](const std::string& what) { problems.push_back(e.kernel_id + ": " + what); };
    if (!ids.insert(e.kernel_id).second) problem("duplicate kernel id");
    std::string prefix =
        e.language + "_" + e.op + "_" + gpu_slug(e.target_gpu) + "_" + e.dtype + "_" + shape_slug(e.shape) + "_v";
    std::string_view version = std::string_view(e.kernel_id).substr(std::min(prefix.size(), e.kernel_id.size()));
    bool version_ok = !version.empty() && std::all_of(version.begin(), version.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    if (!e.kernel_id.starts_with(prefix) || !version_ok)
      problem("id does not match its fields (expected " + prefix + "<n>)");
    // Kiln writes cuda and cpp; Forge's entries are triton.
    if (e.language != "cuda" && e.language != "cpp" && e.language != "triton")
      problem("language must be cuda, cpp or triton");
    if (!e.verification.passed) problem("verification.passed is false");
    if (!e.benchmark.passed) problem("benchmark.passed is false");
    if (std::string why = evidence_level_error(e.evidence_level); !why.empty() && warnings)
      warnings->push_back(e.kernel_id + ": evidence_level: " + why + "; `kiln registry match` skips it");
    if (!e.has_source_sha256 && warnings)
      warnings->push_back(e.kernel_id + ": no source_sha256: " + e.source_path +
                          " cannot be checked against the kernel that was measured (ranked below hashed entries)");
    if (!is_safe_relative(e.source_path)) {
      problem("source_path must be relative and inside the registry");
      continue;
    }
    auto source = read_file(dir_ + "/" + e.source_path);
    if (!source.is_ok()) {
      problem("source " + e.source_path + " is missing");
      continue;
    }
    if (!e.has_source_sha256) continue;  // warned about above
    if (sha256_hex(*source) != e.source_sha256) problem("source " + e.source_path + " does not match source_sha256");
  }
  if (problems.empty()) return Status::ok();
  std::string msg = std::to_string(problems.size()) + " problem(s): ";
  for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
  return failed_precondition(msg);
}

Result<std::string> Registry::promote(const proto::PromoteRequest& r, double min_speedup) const {
  if (!(min_speedup >= kMinPromotionSpeedup)) {
    char bar[64];
    std::snprintf(bar, sizeof bar, "the promotion bar %g is under Forge's %.2f", min_speedup, kMinPromotionSpeedup);
    return failed_precondition(bar);
  }
  KILN_RETURN_IF_ERROR(detail::check_request(r));
  KILN_RETURN_IF_ERROR(detail::check_rules(r, min_speedup));
  const proto::Backend backend = r.backend;
  const std::string language(proto::kernel_language(backend));
  const std::string ext(proto::source_extension(backend));
  const std::string source = effective_source(r);
  const std::string sha = sha256_hex(source);
  const std::map<std::string, int64_t>& shape = r.shape.empty() ? r.confirmation.dims : r.shape;

  KILN_RETURN_IF_ERROR(make_dirs(dir_));
  KILN_ASSIGN_OR_RETURN(FileLock lock, FileLock::acquire(dir_ + "/" + std::string(kLockFile)));
  KILN_ASSIGN_OR_RETURN(Loaded loaded, load(dir_));
  KILN_RETURN_IF_ERROR(detail::check_not_a_copy(loaded.entries, dir_, r, language, source, shape));
  std::set<std::string> ids;
  for (const KernelEntry& e : loaded.entries) ids.insert(e.kernel_id);
  const std::string id = kernel_id(language, r.op, r.worker.device_name, r.dtype, shape, ids);
  const std::string rel = std::string(kKernelsDir) + "/" + language + "/" + r.op + "/" + id + "." + ext;
  const std::string source_path = dir_ + "/" + rel;

  // The source lands first, so the JSON never names a file that is not there.
  KILN_RETURN_IF_ERROR(make_dirs(fs::path(source_path).parent_path().string()));
  KILN_RETURN_IF_ERROR(write_file_atomic(source_path, source));
  loaded.raw.push_back(to_json(detail::entry_for(r, id, language, rel, sha)));
  json doc{{"kernels", loaded.raw}};
  Status written = write_file_atomic(dir_ + "/" + std::string(kRegistryFile), doc.dump(2) + "\n");
  if (!written.is_ok()) {
    std::error_code ec;
    fs::remove(source_path, ec);
    return written;
  }
  return id;
}

}  // namespace kiln::registry
