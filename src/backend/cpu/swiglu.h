#pragma once
// SwiGLU on the CPU: out = silu(gate) * up = gate / (1 + exp(-gate)) * up,
// SIMD (Highway, dispatched at run time).
//
// Determinism: every element takes the same lane-wise vector arithmetic
// (a short last stretch runs as a zero-padded vector, not scalar code), in
// vectors capped at 8 lanes as in the dot kernels, so the bits depend on
// neither the thread split nor AVX2 against AVX-512 (docs/design.md).
#include <cstdint>

namespace shoal {

// out may be gate (in place).
void cpu_swiglu(const float* gate, const float* up, float* out, int64_t n);

}  // namespace shoal
