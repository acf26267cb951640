#pragma once
// Attention of one query head over its sequence's cache, walked in
// fixed-size blocks with the online-softmax recurrence: the same arithmetic
// in prefill and decode, whatever the batch (DESIGN.md, determinism).
#include <cstdint>

#include "backend/backend.h"

namespace shoal {

// q: [head_dim] query of head h; out: [head_dim]. Attends over cache
// positions 0..pos of sequence seq.
void attend_one_head(const float* q, const KvLayerView& kv, int seq, int pos, int h, const AttentionShape& shape,
                     float* out);

}  // namespace shoal
