#pragma once
// `shoal worker --models-dir DIR`: GGUF files the worker already has. A
// tensor the primary asks for is taken from them when one of their tensors
// has the same type, shape and content hash — whatever it is called.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cluster/content_hash.h"
#include "cluster/worker/weight_cache.h"
#include "tensor/dtype.h"

namespace shoal {

class LocalModels {
 public:
  // Scans DIR (not recursively) for *.gguf and reads their headers; files
  // that fail to parse are skipped with a warning.
  explicit LocalModels(const std::string& dir);
  ~LocalModels();

  // Bytes of a tensor with this type and shape whose content hashes to
  // `hash`, from any file in the dir, or empty TensorBytes. Hashes are
  // computed on first need and remembered.
  TensorBytes find(DType type, const std::vector<int64_t>& shape, const ContentHash& hash);
  // The GGUF files found in the dir.
  std::vector<std::string> files() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shoal
