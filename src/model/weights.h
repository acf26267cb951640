#pragma once
// The model's tensors bound to their roles, with shapes checked against the
// config. Views point into the mapped file (or, on a worker, into received
// or cached buffers); nothing is copied.
#include <functional>
#include <string>
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
  Matrix token_embd;          // [n_vocab][n_embd]; empty on a worker
  Matrix output_norm;         // [n_embd] f32; empty on a worker
  Matrix output;              // [n_vocab][n_embd]; token_embd when tied; empty on a worker
  Matrix rope_freqs;          // [rope_dim / 2] f32 or empty
  std::vector<LayerWeights> layers;  // n_layer entries; those outside the bound range are empty
};

// A tensor as the binder sees it: GGUF shape order (shape[0] = row length).
struct TensorRef {
  DType type = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
};
// Finds a tensor by GGUF name; nullptr when absent.
using TensorLookup = std::function<const TensorRef*(const std::string& name)>;

// What part of the model to bind.
struct BindRange {
  int layer_begin = 0;
  int layer_end = -1;       // -1: all layers
  bool with_head = true;    // embedding, output norm and output (the primary's part)
};

// The names of the tensors a range needs, in a fixed order.
std::vector<std::string> tensor_names_for(const ModelConfig& config, const BindRange& range);

// Binds every tensor the range needs; throws naming a missing tensor or a
// wrong shape. `source` names the origin in messages (a file path).
ModelWeights bind_weights(const TensorLookup& lookup, const std::string& source, const ModelConfig& config,
                          const BindRange& range = {});
ModelWeights bind_weights(const gguf::File& file, const ModelConfig& config, const BindRange& range = {});

}  // namespace shoal
