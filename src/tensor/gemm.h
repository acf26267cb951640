#pragma once
// Matrix products on quantized weights, a tile of tokens at a time: each
// weight block is loaded and unpacked once and then multiplied with up to
// four tokens' activations (prefill and batched decode pay for the unpacking
// once per tile instead of once per token).
//
// On x86 with AVX2 (and AVX-512 machines, which run the same 256-bit code),
// the 4/5/8-bit types multiply bytes directly (vpmaddubsw: 32 products per
// instruction) and each block's integer sum is exact; every other target
// and type runs vec_dot's kernels per token.
//
// Determinism: the arithmetic of one output element depends only on its
// weight row and activation row, never on how many tokens share its tile or
// which rows a thread takes (DESIGN.md). A one-token call (decode) and a
// 512-token call (prefill) give the same bits for the same token.
#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace shoal {

// y[t * y_stride + r] = W[r] . act[t] for rows r in [r0, r1) and tokens
// t < n_tokens. Row r of W starts at w + r * w_row_bytes; token t's
// activations (activation_dtype(type), quantize_activation) at
// act + t * act_row_bytes. cols is a whole number of the type's blocks.
void gemm_rows(DType type, const uint8_t* w, size_t w_row_bytes, int64_t r0, int64_t r1, const uint8_t* act,
               size_t act_row_bytes, int n_tokens, int64_t cols, float* y, int64_t y_stride);

}  // namespace shoal
