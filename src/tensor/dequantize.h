#pragma once
// Plain scalar dequantization of one row, for every supported type. Used for
// embedding lookup (get_rows), for tests and for tools — never to expand a
// whole weight matrix in the token loop.
#include <cstdint>

#include "tensor/dtype.h"

namespace shoal {

// Writes n floats to dst from a row of `type` at src; n is a multiple of the
// type's block size.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// IEEE half and bfloat16 conversions.
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float bf16_to_f32(uint16_t h);

}  // namespace shoal
