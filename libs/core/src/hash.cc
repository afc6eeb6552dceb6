#include "kiln/core/hash.h"

#include <openssl/evp.h>
#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <stdexcept>

namespace kiln {

std::string to_hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 0xf]);
  }
  return out;
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr || EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("sha256: cannot initialise OpenSSL digest");
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::update(std::string_view data) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data.data(), data.size());
}

void Sha256::update_field(std::string_view data) {
  uint64_t n = data.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), len, sizeof len);
  update(data);
}

std::string Sha256::hex_digest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), md, &n);
  return to_hex(std::string_view(reinterpret_cast<const char*>(md), n));
}

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.hex_digest();
}

std::string hash_files(const std::map<std::string, std::string>& files) {
  Sha256 h;
  for (const auto& [name, content] : files) {
    h.update_field(name);
    h.update_field(content);
  }
  return h.hex_digest();
}

}  // namespace kiln

namespace kiln {
namespace {
// The raw bytes of a lowercase hex digest.
std::string unhex(const std::string& hex) {
  std::string raw;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    raw.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return raw;
}
}  // namespace

std::string hmac_sha256_hex(std::string_view key, std::string_view data) {
  constexpr size_t kBlock = 64;
  std::string k(key);
  if (k.size() > kBlock) {
    k = unhex(sha256_hex(k));  // keys longer than a block are hashed first
  }
  k.resize(kBlock, '\0');
  std::string ipad(kBlock, '\0'), opad(kBlock, '\0');
  for (size_t i = 0; i < kBlock; ++i) {
    ipad[i] = static_cast<char>(k[i] ^ 0x36);
    opad[i] = static_cast<char>(k[i] ^ 0x5c);
  }
  Sha256 inner;
  inner.update(ipad);
  inner.update(data);
  Sha256 outer;
  outer.update(opad);
  outer.update(unhex(inner.hex_digest()));
  return outer.hex_digest();
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::getrandom(out.data() + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return {};
    }
    got += static_cast<size_t>(r);
  }
  return out;
}

}  // namespace kiln
