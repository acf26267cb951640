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

}  // namespace shoal::wire
