#include "model/weights.h"

#include "gguf/reader.h"
#include "model/tensor_names.h"
#include "util/error.h"

namespace shoal {
namespace {

class Binder {
 public:
  Binder(const gguf::File& f) : f_(f) {}

  // A matrix of exactly [rows][cols]; a 1-D tensor when rows == 1.
  Matrix bind(TensorKind kind, int layer, int64_t rows, int64_t cols, bool f32_only = false) {
    std::string name = tensor_name(kind, layer);
    const gguf::TensorInfo& t = f_.tensor(name);
    int64_t got_rows = t.n_rows();
    if (t.row_length() != cols || got_rows != rows)
      fail("{}: tensor '{}' has shape [{} x {}], expected [{} x {}]", f_.path(), name, got_rows, t.row_length(),
           rows, cols);
    if (f32_only && t.type != DType::F32)
      fail("{}: tensor '{}' is {}, expected F32", f_.path(), name, dtype_info(t.type).name);
    return Matrix{t.type, t.data, rows, cols};
  }

 private:
  const gguf::File& f_;
};

}  // namespace

ModelWeights bind_weights(const gguf::File& f, const ModelConfig& c, int layer_begin, int layer_end) {
  if (layer_end < 0) layer_end = c.n_layer;
  Binder b(f);
  ModelWeights w;
  w.token_embd = b.bind(TensorKind::TokenEmbd, -1, c.n_vocab, c.n_embd);
  w.output_norm = b.bind(TensorKind::OutputNorm, -1, 1, c.n_embd, true);
  w.output = c.tied_output ? w.token_embd : b.bind(TensorKind::Output, -1, c.n_vocab, c.n_embd);
  if (c.rope_freq_factors) w.rope_freqs = b.bind(TensorKind::RopeFreqs, -1, 1, c.rope_dim / 2, true);
  w.layers.resize(c.n_layer);
  for (int l = layer_begin; l < layer_end; ++l) {
    LayerWeights& L = w.layers[l];
    L.attn_norm = b.bind(TensorKind::AttnNorm, l, 1, c.n_embd, true);
    L.wq = b.bind(TensorKind::AttnQ, l, c.q_width(), c.n_embd);
    L.wk = b.bind(TensorKind::AttnK, l, c.kv_width(), c.n_embd);
    L.wv = b.bind(TensorKind::AttnV, l, c.kv_width(), c.n_embd);
    if (c.qkv_bias) {
      L.bq = b.bind(TensorKind::AttnQBias, l, 1, c.q_width(), true);
      L.bk = b.bind(TensorKind::AttnKBias, l, 1, c.kv_width(), true);
      L.bv = b.bind(TensorKind::AttnVBias, l, 1, c.kv_width(), true);
    }
    L.wo = b.bind(TensorKind::AttnOutput, l, c.n_embd, c.q_width());
    L.ffn_norm = b.bind(TensorKind::FfnNorm, l, 1, c.n_embd, true);
    L.ffn_gate = b.bind(TensorKind::FfnGate, l, c.n_ff, c.n_embd);
    L.ffn_up = b.bind(TensorKind::FfnUp, l, c.n_ff, c.n_embd);
    L.ffn_down = b.bind(TensorKind::FfnDown, l, c.n_embd, c.n_ff);
  }
  return w;
}

}  // namespace shoal
