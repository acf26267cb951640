#pragma once
// Strict GGUF reader (versions 2 and 3). Parses the header, metadata and
// tensor directory, validates everything against the file size, and maps the
// tensor data in place. Any defect throws shoal::Error naming the problem and
// the byte offset where it was found.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gguf/value.h"
#include "tensor/dtype.h"
#include "util/mapped_file.h"

namespace shoal::gguf {

struct TensorInfo {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> shape;  // GGUF order: shape[0] is the row length (contiguous)
  uint64_t offset = 0;         // relative to the start of the tensor data section
  const uint8_t* data = nullptr;  // inside the map
  size_t bytes = 0;

  int64_t n_elements() const;
  int64_t row_length() const { return shape.empty() ? 1 : shape[0]; }
  int64_t n_rows() const { return n_elements() / row_length(); }
};

class File {
 public:
  // Opens and validates; throws shoal::Error on any defect.
  static std::unique_ptr<File> open(const std::string& path);
  // Parses from memory already owned by the caller (fuzzing, tests).
  static std::unique_ptr<File> parse(const uint8_t* data, size_t size, const std::string& name);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string& path() const { return name_; }
  size_t file_size() const { return size_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }
  const Value* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }
  // Typed getters: throw if missing (without default) or of the wrong type.
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key) const;
  double get_float(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  const Array& get_array(const std::string& key) const;
  std::vector<std::string> get_strings(const std::string& key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(const std::string& name) const;
  const TensorInfo& tensor(const std::string& name) const;  // throws if absent

 private:
  File() = default;
  void parse_all();

  std::unique_ptr<MappedFile> map_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::map<std::string, size_t> metadata_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace shoal::gguf
