#include "cluster/wire/keyed_hash.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

namespace shoal::wire {

std::array<uint8_t, 32> hmac_sha256(const std::string& key, const std::string& message) {
  std::array<uint8_t, 32> mac{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(message.data()),
       message.size(), mac.data(), &len);
  return mac;
}

std::string to_hex(const uint8_t* bytes, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  s.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    s += digits[bytes[i] >> 4];
    s += digits[bytes[i] & 15];
  }
  return s;
}

}  // namespace shoal::wire
