#include "kiln/core/hash.h"

#include <openssl/evp.h>

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
