#pragma once
// The worker's on-disk weight cache: tensor bytes stored under their content
// hash (SHA-256, as <64 hex digits>.bin) in --cache-dir, bounded by
// --cache-max bytes, least recently used out. A second load of the same model
// finds every tensor here and receives none. Entries named by the XXH3-128 of
// older versions (32 digits) are deleted when the cache is opened.
#include <cstdint>
#include <memory>
#include <string>

#include "cluster/content_hash.h"

namespace shoal {

// Bytes that stay valid while the shared_ptr lives (a mapping of a cache
// file, a slice of a mapped GGUF, or an owned buffer).
struct TensorBytes {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> keepalive;
};

class WeightCache {
 public:
  // Creates `dir` if needed and indexes what it holds; max_bytes 0 = no cache.
  WeightCache(std::string dir, uint64_t max_bytes);
  ~WeightCache();

  // The cached bytes for `hash`, or nullopt-like empty TensorBytes (data ==
  // nullptr). Verifies the size; marks the entry recently used.
  TensorBytes find(const ContentHash& hash, size_t expected_size);
  // Stores verified bytes, evicting least recently used entries to stay
  // under max_bytes (an entry larger than max_bytes is not stored). Writes
  // atomically (temp file + rename), so a crash never leaves a torn entry.
  // Size 0 is never stored (an empty mapping would read as a miss).
  void put(const ContentHash& hash, const void* data, size_t size);
  // Forgets and deletes an entry, e.g. one whose bytes failed the caller's
  // hash check. find() checks sizes only; hashing is the caller's job (the
  // worker checks every tensor's hash before use, whatever its source).
  void remove(const ContentHash& hash);

  uint64_t bytes() const;      // bytes held on disk
  uint64_t max_bytes() const;
  size_t entries() const;
  const std::string& dir() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shoal
