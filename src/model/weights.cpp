#include "model/weights.h"

#include <algorithm>
#include <map>

#include <fmt/ranges.h>

#include "gguf/reader.h"
#include "util/error.h"

namespace shoal {
namespace {

// Calls visit(kind, layer) for every tensor a range needs, in a fixed order
// (the wire's order too).
template <typename Visit>
void for_each_tensor(const ModelConfig& c, const BindRange& r, Visit visit) {
  const int end = r.layer_end < 0 ? c.n_layer : r.layer_end;
  if (r.with_head) {
    if (r.embedding || c.tied_output) visit(TensorKind::TokenEmbd, -1);
    visit(TensorKind::OutputNorm, -1);
    if (!c.tied_output) visit(TensorKind::Output, -1);
    if (r.embedding && c.n_embd_per_layer > 0)
      for (TensorKind k : {TensorKind::PerLayerTokenEmbd, TensorKind::PerLayerModelProj, TensorKind::PerLayerProjNorm})
        visit(k, -1);
  }
  if (c.rope_freq_factors) visit(TensorKind::RopeFreqs, -1);
  for (int l = r.layer_begin; l < end; ++l)
    for (TensorKind k : c.tensors_of(l)) visit(k, l);
}

// The tensor `kind` of `layer`, with its shape checked against the table;
// a 3-D tensor binds as [dims[2] * dims[1]][dims[0]].
Matrix bind(const TensorLookup& lookup, const std::string& source, const ModelConfig& c, TensorKind kind, int layer) {
  const TensorSpec& spec = tensor_spec(kind);
  const std::string name = c.tensor_name(kind, layer);
  const TensorRef* t = lookup(name);
  if (!t) fail("{}: missing tensor '{}'", source, name);
  const int64_t cols = c.dim(spec.dims[0], layer), rows = c.dim(spec.dims[1], layer) * c.dim(spec.dims[2], layer);
  auto trimmed = [](std::vector<int64_t> v) {  // [n, 1, 1] and [n] are the same shape
    while (v.size() > 1 && v.back() == 1) v.pop_back();
    return v;
  };
  const std::vector<int64_t> want = trimmed({cols, c.dim(spec.dims[1], layer), c.dim(spec.dims[2], layer)});
  if (trimmed(t->shape) != want)
    fail("{}: tensor '{}' has shape [{}], expected [{}]", source, name, fmt::join(t->shape, ", "),
         fmt::join(want, ", "));
  if (spec.f32_only && t->type != DType::F32)
    fail("{}: tensor '{}' is {}, expected F32", source, name, dtype_info(t->type).name);
  return Matrix{t->type, t->data, rows, cols};
}

}  // namespace

std::vector<std::string> tensor_names_for(const ModelConfig& c, const BindRange& r) {
  std::vector<std::string> names;
  for_each_tensor(c, r, [&](TensorKind k, int l) { names.push_back(c.tensor_name(k, l)); });
  return names;
}

ModelWeights bind_weights(const TensorLookup& lookup, const std::string& source, const ModelConfig& c,
                          const BindRange& r) {
  const int end = r.layer_end < 0 ? c.n_layer : r.layer_end;
  if (r.layer_begin < 0 || end > c.n_layer || r.layer_begin > end)
    fail("bad layer range [{}, {}) for {} layers", r.layer_begin, end, c.n_layer);
  ModelWeights w;
  w.layers.resize(c.n_layer);
  for_each_tensor(c, r, [&](TensorKind k, int l) {
    Matrix m = bind(lookup, source, c, k, l);
    switch (k) {
      case TensorKind::TokenEmbd: w.token_embd = m; break;
      case TensorKind::OutputNorm: w.output_norm = m; break;
      case TensorKind::Output: w.output = m; break;
      case TensorKind::RopeFreqs: w.rope_freqs = m; break;
      case TensorKind::PerLayerTokenEmbd: w.per_layer_token_embd = m; break;
      case TensorKind::PerLayerModelProj: w.per_layer_model_proj = m; break;
      case TensorKind::PerLayerProjNorm: w.per_layer_proj_norm = m; break;
      default: w.layers[l][k] = m;
    }
  });
  if (r.with_head && c.tied_output) w.output = w.token_embd;
  return w;
}

namespace {

// How a layer's tensor of kind k is read: the rows of one slice of a
// stacked tensor (an expert, a latent head's matrix), 0 when read whole;
// float tensors (norms, biases, a convolution's taps) as stored, row by row.
// Attention's Q, K and V projections are heads a tensor group may divide.
WeightToPrepare prepare_kind(const ModelConfig& c, TensorKind k, int layer, Matrix* m) {
  const TensorSpec& spec = tensor_spec(k);
  const bool stacked = c.dim(spec.dims[2], layer) > 1;
  const HeadRows heads = k == TensorKind::AttnQ                               ? HeadRows::Query
                         : k == TensorKind::AttnK || k == TensorKind::AttnV ? HeadRows::KeyValue
                                                                             : HeadRows::None;
  const AttentionHeads shape = attention_heads(c);
  return {m, stacked ? c.dim(spec.dims[1], layer) : 0, spec.f32_only, stacked && spec.dims[2] == Dim::Experts,
          shape.any() ? heads : HeadRows::None, shape};
}

// Every matrix the range runs on, with the rows of one expert's slice for
// stacked expert tensors.
std::vector<WeightToPrepare> weights_to_prepare(ModelWeights& w, const ModelConfig& c, const BindRange& r) {
  std::vector<WeightToPrepare> out;
  const int begin = std::max(0, r.layer_begin);
  const int end = r.layer_end < 0 ? c.n_layer : std::min(r.layer_end, c.n_layer);
  for (int l = begin; l < end; ++l)
    for (TensorKind k : c.tensors_of(l))
      if (!w.layers[l][k].empty()) out.push_back(prepare_kind(c, k, l, &w.layers[l][k]));
  if (!w.rope_freqs.empty() && end > begin) out.push_back({&w.rope_freqs, 0});
  if (r.with_head) {
    // The head, tied or not (a tied embedding is the same matrix, and
    // follows it below; an untied one is read a row at a time).
    if (!w.output_norm.empty()) out.push_back({&w.output_norm, 0});
    if (!w.output.empty()) out.push_back({&w.output, 0});
    if (!c.tied_output && r.embedding && !w.token_embd.empty()) out.push_back({&w.token_embd, 0, true});
    if (!w.per_layer_token_embd.empty()) out.push_back({&w.per_layer_token_embd, 0, true});  // read by rows
    if (!w.per_layer_model_proj.empty()) out.push_back({&w.per_layer_model_proj, 0});
    if (!w.per_layer_proj_norm.empty()) out.push_back({&w.per_layer_proj_norm, 0});
  }
  return out;
}

}  // namespace

AttentionHeads attention_heads(const ModelConfig& c) {
  // Latent attention reads its heads through the latent, whole-projection
  // Q/K norms read every head, and layers of two geometries (gemma4) have no
  // one division: attention stays whole (its matrices divide by rows).
  if (c.latent_attention() || c.qk_norm_whole || !c.uniform_attention()) return {};
  return {c.n_head, c.n_head_kv, c.head_dim, c.q_proj_width() / c.n_head};
}

int kv_heads_held(const ModelConfig& c, int rank, const ShareWeights& weights) {
  const AttentionHeads heads = attention_heads(c);
  return head_split(heads, static_cast<int>(weights.size())) ? head_share(heads, rank, weights).kv_heads() : 0;
}

std::vector<std::optional<RowShare>> tensor_shares(const ModelConfig& c, const BindRange& r, int rank,
                                                   const ShareWeights& weights) {
  std::vector<std::optional<RowShare>> shares;
  for_each_tensor(c, r, [&](TensorKind k, int l) {
    const TensorSpec& spec = tensor_spec(k);
    const int64_t rows = c.dim(spec.dims[1], l) * c.dim(spec.dims[2], l);
    Matrix shape{DType::F32, nullptr, rows, c.dim(spec.dims[0], l)};
    // A layer's matrices, and the output head's (a tied embedding is it) when the group runs the head.
    const bool head = k == TensorKind::Output || (k == TensorKind::TokenEmbd && c.tied_output);
    shares.push_back(l >= 0 || head ? kept_rows(prepare_kind(c, k, l, &shape), rank, weights) : std::nullopt);
  });
  return shares;
}

uint64_t prepare_weights(Backend& backend, ModelWeights& w, const ModelConfig& c, const BindRange& r) {
  const uint64_t bytes = backend.prepare_weights(weights_to_prepare(w, c, r), w.owned);
  if (r.with_head && c.tied_output) w.token_embd = w.output;  // one copy serves both
  return bytes;
}

uint64_t prepared_bytes(const Backend& backend, ModelWeights& w, const ModelConfig& c, const BindRange& r) {
  return backend.prepared_bytes(weights_to_prepare(w, c, r));
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
