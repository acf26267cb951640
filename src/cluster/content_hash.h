#pragma once
// Content hashes name tensors on the wire and in the worker's cache:
// SHA-256 of a tensor's bytes. The name is trusted — a cached tensor, or one
// a stage in memory holds, is used for any request naming its hash — so it
// must be collision-resistant: under XXH3-128 (before protocol v7) whoever
// could put bytes in a worker's cache could craft a tensor that a later
// model's tensor would be mistaken for. Two files holding the same bytes
// under different names share their hashes.
#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <string>

namespace shoal {

struct ContentHash {
  std::array<uint8_t, 32> bytes{};  // the SHA-256 digest, in its usual byte order

  bool operator==(const ContentHash&) const = default;
  auto operator<=>(const ContentHash&) const = default;
  std::string hex() const;  // 64 lowercase hex digits, as sha256sum prints it
  static ContentHash from_hex(const std::string& hex);  // throws shoal::Error on bad input
};

ContentHash hash_bytes(const void* data, size_t size);

}  // namespace shoal
