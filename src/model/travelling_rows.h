#pragma once
// The rows that travel between stages: each row's n_embd residual values,
// then, for a model with per-layer inputs (gemma4 E2B/E4B), every layer's
// input (ModelConfig::activation_width). The layers read the inputs and
// never change them, so a row goes back (to the head, to the primary)
// without them.
#include <cstdint>
#include <cstring>

namespace shoal {

// The first n rows [n][wide] made [n][narrow] in place, each keeping its
// first narrow values.
inline void narrow_rows(float* rows, int64_t n, int64_t wide, int64_t narrow) {
  if (wide == narrow) return;
  for (int64_t t = 1; t < n; ++t)  // row t moves down, never onto a row not yet moved
    std::memmove(rows + t * narrow, rows + t * wide, narrow * sizeof(float));
}

}  // namespace shoal
