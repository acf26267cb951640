#pragma once
// One pre-norm transformer block, written once for every architecture; the
// differences (biases, rope style, GQA) come from ModelConfig.
#include <memory>

#include "backend/backend.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/weights.h"

namespace shoal {

// Activation buffers for one batch, sized once for the largest batch.
struct LayerScratch {
  LayerScratch(const ModelConfig& c, int max_tokens);
  // What the constructor allocates, for memory planning.
  static uint64_t bytes_for(const ModelConfig& c, int max_tokens);
  std::unique_ptr<float[]> norm;      // [max_tokens][n_embd]
  std::unique_ptr<float[]> q, attn;   // [max_tokens][q_width]
  std::unique_ptr<float[]> k, v;      // [max_tokens][kv_width]
  std::unique_ptr<float[]> gate, up;  // [max_tokens][n_ff]
  std::unique_ptr<float[]> proj;      // [max_tokens][n_embd]
};

// x: the residual stream [batch.size()][n_embd], updated in place.
// kv_layer: this layer's index inside `kv`.
void forward_layer(Backend& be, const ModelConfig& c, const LayerWeights& w, const Matrix& rope_freqs, KvCache& kv,
                   int kv_layer, const Batch& batch, float* x, LayerScratch& s);

}  // namespace shoal
