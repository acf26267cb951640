#pragma once
// Element types of GGUF tensors, numbered as GGUF numbers them (ggml_type),
// with their block geometry. A quantized row is a run of blocks; each block
// holds `block_size` values in `block_bytes` bytes.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace shoal {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  BF16 = 30,
  MXFP4 = 39,
};

struct DTypeInfo {
  DType type;
  std::string_view name;  // "Q4_K", as llama.cpp prints it
  int block_size;         // values per block (1 for plain floats)
  int block_bytes;        // bytes per block
};

// Info for a GGUF type id, or nullptr when Shoal does not know the type.
const DTypeInfo* find_dtype(uint32_t ggml_type);
// Info for a known type (never null).
const DTypeInfo& dtype_info(DType type);

// Bytes of a row of n values; n must be a multiple of the block size.
inline size_t row_bytes(DType type, int64_t n) {
  const DTypeInfo& info = dtype_info(type);
  return static_cast<size_t>(n / info.block_size) * static_cast<size_t>(info.block_bytes);
}

}  // namespace shoal
