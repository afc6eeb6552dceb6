// Content hashing: everything Kiln stores or ships by content is named by its sha256.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace kiln {

// Lowercase hex sha256 of `data`.
std::string sha256_hex(std::string_view data);

// Incremental sha256 for hashing several parts without concatenating them.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(std::string_view data);
  // Length-prefixed update, so ("ab","c") and ("a","bc") hash differently.
  void update_field(std::string_view data);
  std::string hex_digest();

 private:
  void* ctx_;
};

// sha256 over a set of named files, independent of map order: name and content, length-prefixed.
std::string hash_files(const std::map<std::string, std::string>& files);

std::string to_hex(std::string_view bytes);

// Lowercase hex HMAC-SHA256 of `data` under `key` (RFC 2104).
std::string hmac_sha256_hex(std::string_view key, std::string_view data);

// Compares two strings in time that depends only on their lengths (for MACs).
bool constant_time_equal(std::string_view a, std::string_view b);

// `n` bytes from the kernel's random source (getrandom); empty if it fails.
std::string random_bytes(size_t n);

}  // namespace kiln
