#pragma once
// Content hashes name tensors on the wire and in the worker's cache:
// XXH3-128 of a tensor's bytes. Two files holding the same bytes under
// different names share their hashes.
#include <cstddef>
#include <cstdint>
#include <string>

namespace shoal {

struct ContentHash {
  uint64_t low = 0;
  uint64_t high = 0;

  bool operator==(const ContentHash&) const = default;
  bool operator<(const ContentHash& o) const { return high != o.high ? high < o.high : low < o.low; }
  std::string hex() const;  // 32 lowercase hex digits, high word first
  static ContentHash from_hex(const std::string& hex);  // throws shoal::Error on bad input
};

ContentHash hash_bytes(const void* data, size_t size);

}  // namespace shoal
