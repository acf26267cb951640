#pragma once
// HMAC-SHA256 with the cluster key: the handshake's proofs, the frame keys
// and the beacons' tags all come from it.
#include <array>
#include <cstdint>
#include <string>

#include "util/hex.h"

namespace shoal::wire {

std::array<uint8_t, 32> hmac_sha256(const std::string& key, const std::string& message);
inline std::string hmac_sha256_hex(const std::string& key, const std::string& message) {
  const auto mac = hmac_sha256(key, message);
  return to_hex(mac.data(), mac.size());
}

}  // namespace shoal::wire
