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
// which rows a thread takes (docs/design.md). A one-token call (decode) and a
// 512-token call (prefill) give the same bits for the same token.
#include <cstddef>
#include <cstdint>

#include "tensor/matrix.h"

namespace shoal {

// Whether this CPU's matmul reads `type` weights in groups of eight rows
// (tensor/interleave.h) and gains by it; elsewhere they stay plain.
bool gemm_reads_groups(DType type);

// y[t * y_stride + r] = W[r] . act[t] for rows r in [r0, r1) and tokens
// t < n_tokens; token t's activations (activation_dtype(w.type),
// quantize_activation) at act + t * act_row_bytes. A matrix in groups of
// eight rows (w.interleaved) is split only at multiples of 8.
void gemm_rows(const Matrix& w, int64_t r0, int64_t r1, const uint8_t* act, size_t act_row_bytes, int n_tokens,
               float* y, int64_t y_stride);

}  // namespace shoal
