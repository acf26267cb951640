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

// One row per type (dtype.cpp): what code that is not a kernel asks of a
// type reads it here instead of switching on the type. The SIMD kernels
// (vec_dot.cpp, gemm.cpp, interleave.cpp, the CPU attention's KV reads)
// keep a switch each: Highway compiles them once per CPU target, where a
// table of pointers cannot reach. docs/architecture.md, "Adding a weight
// type", lists every place a new one goes.
struct DTypeInfo {
  DType type;
  std::string_view name;  // "Q4_K", as llama.cpp prints it
  int block_size;         // values per block (1 for plain floats)
  int block_bytes;        // bytes per block
  bool weight;            // a weight type GGUF files carry (Q8_1, Q8_K: activations only)
  // What matmul rounds activations to for this weight (vec_dot.h): F32
  // for float weights, Q8_0 for 32-value blocks, Q8_K for K-quants.
  DType activation;
  // Exact dequantization of n_blocks blocks (tensor/dequantize.cpp); null
  // for a type Shoal never reads back (Q8_1).
  void (*dequantize)(const void* blocks, float* out, int64_t n_blocks);
};

// Info for a GGUF type id, or nullptr when Shoal does not know the type.
const DTypeInfo* find_dtype(uint32_t ggml_type);
// Info for a known type (never null; a lookup by index, cheap per element).
const DTypeInfo& dtype_info(DType type);

// Bytes of a row of n values; n must be a multiple of the block size.
inline size_t row_bytes(DType type, int64_t n) {
  const DTypeInfo& info = dtype_info(type);
  return static_cast<size_t>(n / info.block_size) * static_cast<size_t>(info.block_bytes);
}

}  // namespace shoal
