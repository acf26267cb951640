#pragma once
// Qwen3.5's Gated DeltaNet on the CPU (Backend::delta_net): the causal
// convolution, the L2 norms and the delta-rule recurrence, each row of the
// step on its sequence's state, in step order.
//
// Determinism: every row is one fixed sequence of operations on its own
// sequence's state, so the bits do not depend on the batch it came in, the
// rows beside it or the thread split (threads take whole channels and whole
// value heads). The state is kept transposed (element [j][i]: row i,
// column j of S), so every loop that sums runs over j for all i at once and
// vectorises lane by lane without reordering any sum.
#include <cstdint>

#include "backend/backend.h"
#include "util/thread_pool.h"

namespace shoal {

struct DeltaNetStep {
  float* qkv;                // [n_tokens][conv_width], convolved in place
  const float* alpha;        // [n_tokens][n_v_heads]
  const float* beta;         // [n_tokens][n_v_heads]
  float* conv_state;         // RecurrentLayer::conv, as host memory
  float* ssm_state;          // RecurrentLayer::ssm
  size_t conv_seq_floats;    // the strides, in floats
  size_t ssm_seq_floats;
  const int32_t* seq_ids;    // the step's rows
  const int32_t* positions;
  int n_tokens;
  float* out;                // [n_tokens][value_width]
};

void cpu_delta_net(ThreadPool& pool, const DeltaNetParams& p, const DeltaNetStep& step);

}  // namespace shoal
