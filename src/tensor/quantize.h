#pragma once
// Scalar encoders from f32 to block formats, written from the layouts in
// blocks.h. The weight encoders (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) follow ggml's
// reference rounding so tests can build realistic blocks; the fast
// activation path is quantize_activation (vec_dot.h), which must produce the
// same bytes as quantize_row_reference for Q8_0 and Q8_K.
#include <cstdint>

#include "tensor/dtype.h"

namespace shoal {

// Encodes n floats (a multiple of the block size) into `type` at dst
// (row_bytes(type, n) bytes). Supported: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_K;
// other types throw shoal::Error.
void quantize_row_reference(DType type, const float* src, void* dst, int64_t n);

}  // namespace shoal
