#pragma once
// One transformer block, written once for every architecture. The variants
// come from the data: Q/K norms, biases and post-norms apply when the layer
// has those tensors, experts replace the FFN when it has a router, and the
// activation, rope and window come from ModelConfig.
#include <memory>
#include <vector>

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
  std::unique_ptr<float[]> gate, up;  // [max_tokens][max(n_ff, n_ff_exp)]
  std::unique_ptr<float[]> proj;      // [max_tokens][n_embd]
  // Mixture of experts only (empty otherwise).
  std::unique_ptr<float[]> router;    // [max_tokens][n_expert]
  std::unique_ptr<float[]> gathered;  // [max_tokens][n_embd]: the rows routed to one expert
  std::unique_ptr<float[]> expert_out;  // [max_tokens][n_expert_used][n_embd]
  std::vector<int> route_expert;        // [max_tokens][n_expert_used]: each token's experts, best first
  std::vector<float> route_weight;      // their weights
  std::vector<int> expert_order;        // [n_expert], for the top-k sort
  std::vector<int> expert_rows;         // [max_tokens]: t * k + j of the rows routed to one expert
};

// x: the residual stream [batch.size()][n_embd], updated in place.
// layer: the model's layer index; kv_layer: this layer's index inside `kv`.
void forward_layer(Backend& be, const ModelConfig& c, int layer, const LayerWeights& w, const Matrix& rope_freqs,
                   KvCache& kv, int kv_layer, const Batch& batch, float* x, LayerScratch& s);

}  // namespace shoal
