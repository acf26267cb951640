#pragma once
// The scalar forms of the optional element-wise ops, shared by the CPU
// backend and Backend's host defaults (optional_ops.cpp): one formula each.
#include <algorithm>
#include <cmath>

namespace shoal {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// gpt-oss's clamped SwiGLU, with its constants as llama.cpp has them.
inline float clamped_swiglu(float gate, float up) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  const float x = std::min(gate, kLimit), y = std::clamp(up, -kLimit, kLimit);
  return x / (1.0f + std::exp(kAlpha * -x)) * (y + 1.0f);
}

}  // namespace shoal
