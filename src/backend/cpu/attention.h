#pragma once
// Causal attention on the CPU: SIMD (Highway, dispatched at run time), one
// pass with the online-softmax recurrence, each K/V row read once for all
// the query heads of its grouped-query group.
//
// Determinism: a query's positions are cut into fixed chunks of kChunk
// (counted from its first visible position); each chunk's partial softmax is
// computed from scratch and the partials are merged in chunk order. Whether
// the chunks of one query run on one thread or are spread over many (decode,
// where there are few queries), and whatever else is in the batch, the
// arithmetic is the same (docs/design.md).
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "util/thread_pool.h"

namespace shoal {

// The cache as the kernels read it: host addresses.
using KvLayerView = KvView<uint8_t*>;

inline constexpr int kAttentionChunk = 128;  // cache positions per partial softmax
inline constexpr int kAttentionMaxHeadDim = 576;  // latent attention's cached row: 512 + 64
inline constexpr int kAttentionMaxGroup = 128;  // query heads per KV head (latent attention: every head)

// Buffers that grow to what a call needs and are kept for the next one.
struct AttentionScratch {
  std::vector<float> partials;         // chunk partials when a step's chunks are spread over threads
  std::vector<int64_t> chunk_offsets;  // first chunk of each (token, KV head)
  std::vector<uint8_t> q8;             // the queries in Q8_0 when K is Q8_0
};

// q: [n_tokens][n_head * head_dim], out: [n_tokens][n_head * v_dim].
void cpu_attention(ThreadPool& pool, const float* q, const KvLayerView& kv, const int32_t* seq_ids,
                   const int32_t* positions, int n_tokens, const AttentionShape& shape, float* out,
                   AttentionScratch& scratch);

// Plain scalar attention over the same cache, in double: the reference the
// kernel is tested against.
void cpu_attention_reference(const float* q, const KvLayerView& kv, const int32_t* seq_ids, const int32_t* positions,
                             int n_tokens, const AttentionShape& shape, float* out);

}  // namespace shoal
