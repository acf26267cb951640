#pragma once
// A weight matrix in place (inside the mapped GGUF or a stage's own buffer):
// `rows` rows of `cols` values each, row-major, rows stored back to back in
// `type`'s blocks. A 1-D tensor is one row.
#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace shoal {

struct Matrix {
  DType type = DType::F32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;  // values per row (GGUF shape[0])
  // Rows in groups of eight (tensor/interleave.h): the matmul reads them;
  // row() then means nothing for rows before the plain tail.
  bool interleaved = false;

  bool empty() const { return data == nullptr; }
  size_t row_stride() const { return row_bytes(type, cols); }
  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_stride(); }
  size_t bytes() const { return static_cast<size_t>(rows) * row_stride(); }
  // F32 data as floats (1-D norms and biases).
  const float* f32() const { return reinterpret_cast<const float*>(data); }
};

}  // namespace shoal
