#include "model/weights.h"

#include <map>

#include "gguf/reader.h"
#include "model/tensor_names.h"
#include "util/error.h"

namespace shoal {
namespace {

class Binder {
 public:
  Binder(const TensorLookup& lookup, const std::string& source) : lookup_(lookup), source_(source) {}

  // A matrix of exactly [rows][cols]; a 1-D tensor when rows == 1.
  Matrix bind(TensorKind kind, int layer, int64_t rows, int64_t cols, bool f32_only = false) {
    std::string name = tensor_name(kind, layer);
    const TensorRef* t = lookup_(name);
    if (!t) fail("{}: missing tensor '{}'", source_, name);
    int64_t n = 1;
    for (int64_t d : t->shape) n *= d;
    const int64_t row_length = t->shape.empty() ? 1 : t->shape[0];
    if (row_length != cols || n / row_length != rows)
      fail("{}: tensor '{}' has shape [{} x {}], expected [{} x {}]", source_, name, n / row_length, row_length, rows,
           cols);
    if (f32_only && t->type != DType::F32)
      fail("{}: tensor '{}' is {}, expected F32", source_, name, dtype_info(t->type).name);
    return Matrix{t->type, t->data, rows, cols};
  }

 private:
  const TensorLookup& lookup_;
  const std::string& source_;
};

// Calls visit(kind, layer) for every tensor a range needs, in a fixed order.
template <typename Visit>
void for_each_tensor(const ModelConfig& c, const BindRange& r, Visit visit) {
  const int end = r.layer_end < 0 ? c.n_layer : r.layer_end;
  if (r.with_head) {
    visit(TensorKind::TokenEmbd, -1);
    visit(TensorKind::OutputNorm, -1);
    if (!c.tied_output) visit(TensorKind::Output, -1);
  }
  if (c.rope_freq_factors) visit(TensorKind::RopeFreqs, -1);
  for (int l = r.layer_begin; l < end; ++l) {
    for (TensorKind k : {TensorKind::AttnNorm, TensorKind::AttnQ, TensorKind::AttnK, TensorKind::AttnV})
      visit(k, l);
    if (c.qkv_bias)
      for (TensorKind k : {TensorKind::AttnQBias, TensorKind::AttnKBias, TensorKind::AttnVBias}) visit(k, l);
    for (TensorKind k : {TensorKind::AttnOutput, TensorKind::FfnNorm, TensorKind::FfnGate, TensorKind::FfnUp,
                         TensorKind::FfnDown})
      visit(k, l);
  }
}

}  // namespace

std::vector<std::string> tensor_names_for(const ModelConfig& c, const BindRange& r) {
  std::vector<std::string> names;
  for_each_tensor(c, r, [&](TensorKind k, int l) { names.push_back(tensor_name(k, l)); });
  return names;
}

ModelWeights bind_weights(const TensorLookup& lookup, const std::string& source, const ModelConfig& c,
                          const BindRange& r) {
  const int end = r.layer_end < 0 ? c.n_layer : r.layer_end;
  if (r.layer_begin < 0 || end > c.n_layer || r.layer_begin > end)
    fail("bad layer range [{}, {}) for {} layers", r.layer_begin, end, c.n_layer);
  Binder b(lookup, source);
  ModelWeights w;
  if (r.with_head) {
    w.token_embd = b.bind(TensorKind::TokenEmbd, -1, c.n_vocab, c.n_embd);
    w.output_norm = b.bind(TensorKind::OutputNorm, -1, 1, c.n_embd, true);
    w.output = c.tied_output ? w.token_embd : b.bind(TensorKind::Output, -1, c.n_vocab, c.n_embd);
  }
  if (c.rope_freq_factors) w.rope_freqs = b.bind(TensorKind::RopeFreqs, -1, 1, c.rope_dim / 2, true);
  w.layers.resize(c.n_layer);
  for (int l = r.layer_begin; l < end; ++l) {
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

ModelWeights bind_weights(const gguf::File& f, const ModelConfig& c, const BindRange& r) {
  std::map<std::string, TensorRef> refs;
  for (const auto& t : f.tensors()) refs[t.name] = TensorRef{t.type, t.shape, t.data};
  TensorLookup lookup = [&](const std::string& name) -> const TensorRef* {
    auto it = refs.find(name);
    return it == refs.end() ? nullptr : &it->second;
  };
  return bind_weights(lookup, f.path(), c, r);
}

}  // namespace shoal
