#pragma once
// A small GGUF (version 3) writer: metadata in insertion order, tensors in
// insertion order, each tensor's data aligned. It exists to make test files
// (renamed tensors, edited metadata) and, later, quantized copies of a model.
// What it writes, gguf/reader.h reads back unchanged.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gguf/value.h"
#include "tensor/dtype.h"

namespace shoal::gguf {

// Value builders, so that callers need not know how Value stores each type.
Value make_u32(uint32_t v);
Value make_i32(int32_t v);
Value make_u64(uint64_t v);
Value make_f32(float v);
Value make_bool(bool v);
Value make_string(std::string v);
Value make_array(ValueType element_type, std::vector<Value> items);
Value make_string_array(const std::vector<std::string>& items);

class Writer {
 public:
  // alignment: of the tensor data section and of every tensor in it; a power
  // of two. Anything other than GGUF's default 32 is recorded as
  // general.alignment (u32) so that readers agree.
  explicit Writer(uint64_t alignment = 32);

  // Adds a metadata entry; throws shoal::Error on a duplicate key or a value
  // whose payload does not match its declared type.
  void add(const std::string& key, Value value);
  // Adds a tensor. `data` is borrowed, not copied (a model's weights are
  // large): it must stay valid until write() returns. Throws on a duplicate
  // name, a shape the reader would refuse, or a size that does not match
  // type and shape.
  void add_tensor(const std::string& name, DType type, const std::vector<int64_t>& shape, const void* data,
                  size_t size);

  // The whole file in memory (tests, small files).
  std::vector<uint8_t> to_bytes() const;
  // Writes the file; throws shoal::Error naming the path on any I/O error.
  void write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
    const uint8_t* data;
    size_t size;
    uint64_t offset;  // within the data section
  };
  // Everything up to the start of the data section (header, metadata, tensor
  // infos, padding).
  std::vector<uint8_t> header_bytes() const;

  uint64_t alignment_;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<Tensor> tensors_;
  uint64_t data_size_ = 0;  // running end of the data section
};

}  // namespace shoal::gguf
