#pragma once
// The model's tensors bound to their roles, with shapes checked against the
// config. Views point into the mapped file; nothing is copied.
#include <vector>

#include "model/config.h"
#include "tensor/matrix.h"

namespace shoal {
namespace gguf { class File; }

struct LayerWeights {
  Matrix attn_norm;           // [n_embd] f32
  Matrix wq, wk, wv;          // [q_width | kv_width rows][n_embd]
  Matrix bq, bk, bv;          // biases, f32, empty unless config.qkv_bias
  Matrix wo;                  // [n_embd][q_width]
  Matrix ffn_norm;            // [n_embd] f32
  Matrix ffn_gate, ffn_up;    // [n_ff][n_embd]
  Matrix ffn_down;            // [n_embd][n_ff]
};

struct ModelWeights {
  Matrix token_embd;          // [n_vocab][n_embd]
  Matrix output_norm;         // [n_embd] f32
  Matrix output;              // [n_vocab][n_embd]; token_embd when tied
  Matrix rope_freqs;          // [rope_dim / 2] f32 or empty
  std::vector<LayerWeights> layers;
};

// Binds every tensor the config needs; throws naming a missing tensor or a
// wrong shape. Layers outside [layer_begin, layer_end) are left empty.
ModelWeights bind_weights(const gguf::File& file, const ModelConfig& config, int layer_begin = 0, int layer_end = -1);

}  // namespace shoal
