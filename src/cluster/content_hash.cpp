#include "cluster/content_hash.h"

#include <fmt/format.h>
#include <xxhash.h>

#include "util/error.h"

namespace shoal {

std::string ContentHash::hex() const { return fmt::format("{:016x}{:016x}", high, low); }

ContentHash ContentHash::from_hex(const std::string& hex) {
  if (hex.size() != 32 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
    fail("bad content hash '{}'", hex);
  return ContentHash{std::stoull(hex.substr(16, 16), nullptr, 16), std::stoull(hex.substr(0, 16), nullptr, 16)};
}

ContentHash hash_bytes(const void* data, size_t size) {
  XXH128_hash_t h = XXH3_128bits(data, size);
  return ContentHash{h.low64, h.high64};
}

}  // namespace shoal
