// CURVE key pairs for the broker's external endpoint (DESIGN §2, external bridges). Keys travel as Z85
// text (40 characters for 32 bytes); a key file holds one such line. Secret key files are mode 0600.
#pragma once

#include <string>

#include "kiln/core/status.h"

namespace kiln::messaging {

inline constexpr size_t kCurveKeyZ85Chars = 40;

struct CurveKeyPair {
  std::string public_key;  // Z85
  std::string secret_key;  // Z85
};

// A valid bridge (key pair) name: 1-64 characters of [A-Za-z0-9_.-]. It names the key files, the
// allowlist entry, and becomes a log word and a metric label.
bool is_valid_bridge_name(const std::string& name);

// Whether this libzmq was built with CURVE (libsodium or tweetnacl).
bool curve_available();

Result<CurveKeyPair> generate_curve_keypair();

// Checks that `z85` is 40 Z85 characters that decode to 32 bytes; returns the 32 raw bytes.
Result<std::string> decode_curve_key(const std::string& z85);
// Z85 of 32 raw bytes.
std::string encode_curve_key(const std::string& raw);
// The public key that belongs to a secret key (both Z85).
Result<std::string> curve_public_of(const std::string& secret_z85);

// Reads a key file: one Z85 key; surrounding whitespace and blank lines are ignored.
Result<std::string> read_curve_key_file(const std::string& path);
// Writes `<secret_path>` (0600) and `<public_path>` (0644), each one Z85 line. Refuses to overwrite an
// existing file: a key pair that someone already handed out must not silently change.
Status write_curve_keypair(const CurveKeyPair& pair, const std::string& secret_path, const std::string& public_path);

// A server's key pair: read from the two files, or generated and written when both are absent. Checks
// that the public key belongs to the secret key. `created` (optional) says whether it was generated.
Result<CurveKeyPair> load_or_create_curve_keypair(const std::string& secret_path, const std::string& public_path,
                                                  bool* created = nullptr);

}  // namespace kiln::messaging
