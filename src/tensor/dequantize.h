#pragma once
// Plain scalar dequantization of one row, for every supported type. Used for
// embedding lookup (get_rows), for tests and for tools — never to expand a
// whole weight matrix in the token loop.
#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/matrix.h"

namespace shoal {

// Writes n floats to dst from a row of `type` at src; n is a multiple of the
// type's block size.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// Fails (shoal::Error) on an id outside m's rows: every backend's lookup
// checks its host ids with this before it reads.
void check_row_ids(const Matrix& m, const int32_t* ids, int n);
// The embedding lookup: rows ids[0..n) of m as floats, back to back at
// out, whichever layout m's rows are in; fails on an id outside m.
void dequantize_rows(const Matrix& m, const int32_t* ids, int n, float* out);

// One per block layout, n_blocks blocks to floats: the `dequantize` column
// of the type table (dtype.cpp).
namespace dequantize_blocks {
void f32(const void* blocks, float* out, int64_t n_blocks);
void f16(const void* blocks, float* out, int64_t n_blocks);
void bf16(const void* blocks, float* out, int64_t n_blocks);
void q4_0(const void* blocks, float* out, int64_t n_blocks);
void q4_1(const void* blocks, float* out, int64_t n_blocks);
void q5_0(const void* blocks, float* out, int64_t n_blocks);
void q5_1(const void* blocks, float* out, int64_t n_blocks);
void q8_0(const void* blocks, float* out, int64_t n_blocks);
void q8_k(const void* blocks, float* out, int64_t n_blocks);
void q2_k(const void* blocks, float* out, int64_t n_blocks);
void q3_k(const void* blocks, float* out, int64_t n_blocks);
void q4_k(const void* blocks, float* out, int64_t n_blocks);
void q5_k(const void* blocks, float* out, int64_t n_blocks);
void q6_k(const void* blocks, float* out, int64_t n_blocks);
void mxfp4(const void* blocks, float* out, int64_t n_blocks);
}  // namespace dequantize_blocks

// IEEE half and bfloat16 conversions.
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float bf16_to_f32(uint16_t h);

}  // namespace shoal
