#pragma once
// Dot products straight on quantized blocks: the one kernel every matmul is
// built from. The activation side is first converted to the format the
// weight type pairs with (activation_dtype), once per row of activations,
// then each output element is vec_dot(weight_row, activation_row).
//
// Determinism: vec_dot is a pure function of its inputs on a given SIMD
// target — the reduction order is fixed by the block order and lane
// grouping, never by the caller — so a matvec and a batched matmul produce
// the same bits for the same element.
#include <cstdint>

#include "tensor/dtype.h"

namespace shoal {

// The format the activations must be in for a dot with a `weight` row:
// F32 for F32/F16/BF16 weights, Q8_0 for the 32-blocks, Q8_K for K-quants.
DType activation_dtype(DType weight);

// Converts n f32 activations into activation_dtype(weight) at `dst`
// (row_bytes(activation_dtype(weight), n) bytes).
void quantize_activation(DType weight, const float* src, void* dst, int64_t n);

// sum_i w[i] * a[i] over n values; `activation` is in activation_dtype(weight).
// Runtime-dispatched SIMD (Highway).
float vec_dot(DType weight, const void* weight_row, const void* activation, int64_t n);

// The same, written plainly from the format description: the reference the
// SIMD kernels are tested against.
float vec_dot_reference(DType weight, const void* weight_row, const void* activation, int64_t n);

}  // namespace shoal
