#include "kiln/messaging/curve.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "kiln/core/files.h"

namespace kiln::messaging {

namespace {

constexpr size_t kCurveKeyBytes = 32;
constexpr size_t kMaxKeyFileBytes = 4096;

Status write_new_file(const std::string& path, const std::string& content, mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    if (errno == EEXIST) return failed_precondition(path + ": already exists (not overwritten)");
    return unavailable(path + ": cannot create: " + std::strerror(errno));
  }
  // The umask may have narrowed the mode; a secret key must be exactly owner-only either way.
  (void)::fchmod(fd, mode);
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string err = std::strerror(errno);
      ::close(fd);
      ::unlink(path.c_str());
      return unavailable(path + ": write failed: " + err);
    }
    done += static_cast<size_t>(n);
  }
  bool synced = ::fsync(fd) == 0;
  int sync_errno = errno;
  if (::close(fd) != 0 || !synced) {
    ::unlink(path.c_str());
    return unavailable(path + ": cannot flush: " + std::strerror(synced ? errno : sync_errno));
  }
  return Status::ok();
}

}  // namespace

bool is_valid_bridge_name(const std::string& name) {
  constexpr size_t kMaxChars = 64;
  if (name.empty() || name.size() > kMaxChars) return false;
  for (unsigned char c : name) {
    bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return name != "." && name != "..";
}

bool curve_available() { return zmq_has("curve") != 0; }

Result<CurveKeyPair> generate_curve_keypair() {
  if (!curve_available()) return failed_precondition("this libzmq was built without CURVE support");
  char pub[kCurveKeyZ85Chars + 1] = {};
  char sec[kCurveKeyZ85Chars + 1] = {};
  if (zmq_curve_keypair(pub, sec) != 0)
    return internal_error(std::string("zmq_curve_keypair: ") + zmq_strerror(zmq_errno()));
  return CurveKeyPair{pub, sec};
}

Result<std::string> decode_curve_key(const std::string& z85) {
  if (z85.size() != kCurveKeyZ85Chars)
    return invalid_argument("expected a " + std::to_string(kCurveKeyZ85Chars) + "-character Z85 key, got " +
                            std::to_string(z85.size()) + " characters");
  std::string raw(kCurveKeyBytes, '\0');
  if (zmq_z85_decode(reinterpret_cast<uint8_t*>(raw.data()), z85.c_str()) == nullptr)
    return invalid_argument("not a Z85 key");
  return raw;
}

std::string encode_curve_key(const std::string& raw) {
  if (raw.size() != kCurveKeyBytes) return {};
  char out[kCurveKeyZ85Chars + 1] = {};
  zmq_z85_encode(out, reinterpret_cast<const uint8_t*>(raw.data()), raw.size());
  return out;
}

Result<std::string> curve_public_of(const std::string& secret_z85) {
  KILN_RETURN_IF_ERROR(decode_curve_key(secret_z85).status());
  char pub[kCurveKeyZ85Chars + 1] = {};
  if (zmq_curve_public(pub, secret_z85.c_str()) != 0)
    return failed_precondition(std::string("zmq_curve_public: ") + zmq_strerror(zmq_errno()));
  return std::string(pub);
}

Result<std::string> read_curve_key_file(const std::string& path) {
  auto text = read_file(path, kMaxKeyFileBytes);
  if (!text.is_ok()) return text.status();
  std::istringstream in(*text);
  std::string line, key;
  while (std::getline(in, line)) {
    size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos) continue;  // no comments: '#' is a Z85 character
    size_t e = line.find_last_not_of(" \t\r");
    if (!key.empty()) return invalid_argument(path + ": expected one key, found more lines");
    key = line.substr(b, e - b + 1);
  }
  if (key.empty()) return invalid_argument(path + ": no key in the file");
  auto raw = decode_curve_key(key);
  if (!raw.is_ok()) return raw.status().with_context(path);
  return key;
}

Status write_curve_keypair(const CurveKeyPair& pair, const std::string& secret_path, const std::string& public_path) {
  KILN_RETURN_IF_ERROR(decode_curve_key(pair.secret_key).status().with_context("secret key"));
  KILN_RETURN_IF_ERROR(decode_curve_key(pair.public_key).status().with_context("public key"));
  if (::access(public_path.c_str(), F_OK) == 0)
    return failed_precondition(public_path + ": already exists (not overwritten)");
  KILN_RETURN_IF_ERROR(write_new_file(secret_path, pair.secret_key + "\n", 0600));
  Status st = write_new_file(public_path, pair.public_key + "\n", 0644);
  if (!st.is_ok()) ::unlink(secret_path.c_str());
  return st;
}

Result<CurveKeyPair> load_or_create_curve_keypair(const std::string& secret_path, const std::string& public_path,
                                                  bool* created) {
  bool has_secret = ::access(secret_path.c_str(), F_OK) == 0;
  bool has_public = ::access(public_path.c_str(), F_OK) == 0;
  if (created) *created = false;
  if (!has_secret && !has_public) {
    auto pair = generate_curve_keypair();
    if (!pair.is_ok()) return pair.status();
    KILN_RETURN_IF_ERROR(write_curve_keypair(*pair, secret_path, public_path));
    if (created) *created = true;
    return pair;
  }
  if (!has_secret) return failed_precondition(secret_path + ": missing, but " + public_path + " exists");
  if (!has_public) return failed_precondition(public_path + ": missing, but " + secret_path + " exists");
  CurveKeyPair pair;
  KILN_ASSIGN_OR_RETURN(pair.secret_key, read_curve_key_file(secret_path));
  KILN_ASSIGN_OR_RETURN(pair.public_key, read_curve_key_file(public_path));
  auto derived = curve_public_of(pair.secret_key);
  if (!derived.is_ok()) return derived.status().with_context(secret_path);
  if (*derived != pair.public_key) return failed_precondition(public_path + ": not the public key of " + secret_path);
  return pair;
}

}  // namespace kiln::messaging
