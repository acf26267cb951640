#include "cluster/content_hash.h"

#include <openssl/evp.h>

#include "util/error.h"
#include "util/hex.h"

namespace shoal {

namespace {
constexpr char kDigits[] = "0123456789abcdef";
}

std::string ContentHash::hex() const { return to_hex(bytes.data(), bytes.size()); }

ContentHash ContentHash::from_hex(const std::string& hex) {
  ContentHash h;
  // Lowercase only: one spelling per hash, so names compare as strings too.
  if (hex.size() != h.bytes.size() * 2 || hex.find_first_not_of(kDigits) != std::string::npos)
    fail("bad content hash '{}'", hex.substr(0, 80));
  auto nibble = [](char c) { return static_cast<uint8_t>(c <= '9' ? c - '0' : c - 'a' + 10); };
  for (size_t i = 0; i < h.bytes.size(); ++i)
    h.bytes[i] = static_cast<uint8_t>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  return h;
}

ContentHash hash_bytes(const void* data, size_t size) {
  // EVP picks OpenSSL's fastest SHA-256 for this CPU (SHA-NI where there is one).
  ContentHash h;
  unsigned int len = 0;
  if (EVP_Digest(data, size, h.bytes.data(), &len, EVP_sha256(), nullptr) != 1 || len != h.bytes.size())
    fail("SHA-256 failed");
  return h;
}

}  // namespace shoal
