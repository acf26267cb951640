#include "model/weights.h"

#include <algorithm>
#include <map>

#include <fmt/ranges.h>

#include "gguf/reader.h"
#include "tensor/gemm.h"
#include "tensor/interleave.h"
#include "util/thread_pool.h"
#include "util/error.h"

namespace shoal {
namespace {

// Calls visit(kind, layer) for every tensor a range needs, in a fixed order
// (the wire's order too).
template <typename Visit>
void for_each_tensor(const ModelConfig& c, const BindRange& r, Visit visit) {
  const int end = r.layer_end < 0 ? c.n_layer : r.layer_end;
  if (r.with_head) {
    visit(TensorKind::TokenEmbd, -1);
    visit(TensorKind::OutputNorm, -1);
    if (!c.tied_output) visit(TensorKind::Output, -1);
  }
  if (c.rope_freq_factors) visit(TensorKind::RopeFreqs, -1);
  for (int l = r.layer_begin; l < end; ++l)
    for (TensorKind k : c.layer_tensors) visit(k, l);
}

// The tensor `kind` of `layer`, with its shape checked against the table;
// a 3-D tensor binds as [dims[2] * dims[1]][dims[0]].
Matrix bind(const TensorLookup& lookup, const std::string& source, const ModelConfig& c, TensorKind kind, int layer) {
  const TensorSpec& spec = tensor_spec(kind);
  const std::string name = tensor_name(kind, layer);
  const TensorRef* t = lookup(name);
  if (!t) fail("{}: missing tensor '{}'", source, name);
  const int64_t cols = c.dim(spec.dims[0]), rows = c.dim(spec.dims[1]) * c.dim(spec.dims[2]);
  auto trimmed = [](std::vector<int64_t> v) {  // [n, 1, 1] and [n] are the same shape
    while (v.size() > 1 && v.back() == 1) v.pop_back();
    return v;
  };
  const std::vector<int64_t> want = trimmed({cols, c.dim(spec.dims[1]), c.dim(spec.dims[2])});
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
  for_each_tensor(c, r, [&](TensorKind k, int l) { names.push_back(tensor_name(k, l)); });
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
      default: w.layers[l][k] = m;
    }
  });
  if (r.with_head && c.tied_output) w.output = w.token_embd;
  return w;
}

namespace {

// Calls fn(matrix) for every matrix group_rows_for_cpu may rewrite.
template <class Weights, class Fn>
void for_each_groupable(Weights& w, const ModelConfig& c, const BindRange& r, Fn&& fn) {
  auto consider = [&](auto& m, int64_t rows_per_slice) {
    // An expert tensor is cut into slices of rows per expert: a group must not straddle two.
    if (!m.empty() && !m.interleaved && interleavable(m.type, m.cols) && gemm_reads_groups(m.type) && m.rows >= 8 &&
        rows_per_slice % 8 == 0)
      fn(m);
  };
  const int end = r.layer_end < 0 ? c.n_layer : std::min(r.layer_end, c.n_layer);
  for (int l = std::max(0, r.layer_begin); l < end; ++l)
    for (TensorKind k : c.layer_tensors) {
      const TensorSpec& spec = tensor_spec(k);
      const bool experts = c.dim(spec.dims[2]) > 1;
      consider(w.layers[l][k], experts ? c.dim(spec.dims[1]) : 8);
    }
  // The head, tied or not: the embedding lookup takes single rows out of
  // their groups (dequantize_rows), and the head's matmul is the largest of
  // a decode step.
  if (r.with_head) consider(w.output, 8);
}

}  // namespace

uint64_t groupable_bytes(const ModelWeights& w, const ModelConfig& c, const BindRange& r) {
  uint64_t bytes = 0;
  for_each_groupable(w, c, r, [&](const Matrix& m) { bytes += m.bytes(); });
  return bytes;
}

uint64_t group_rows_for_cpu(ModelWeights& w, const ModelConfig& c, const BindRange& r, ThreadPool& pool) {
  uint64_t bytes = 0;
  for_each_groupable(w, c, r, [&](Matrix& m) {
    std::unique_ptr<uint8_t[]> copy(new uint8_t[m.bytes()]);
    // Whole groups per chunk (the last chunk takes the plain tail).
    const size_t group_bytes = 8 * m.row_stride();
    const int64_t groups = m.rows / 8;
    pool.parallel_for(groups, 1, [&](int64_t g0, int64_t g1) {
      const int64_t rows = g1 == groups ? m.rows - g0 * 8 : (g1 - g0) * 8;
      interleave_rows(m.type, m.data + g0 * group_bytes, rows, m.cols, copy.get() + g0 * group_bytes);
    });
    m.data = copy.get();
    m.interleaved = true;
    bytes += m.bytes();
    w.owned.push_back(std::move(copy));
  });
  if (r.with_head && c.tied_output) w.token_embd = w.output;  // one copy serves both
  return bytes;
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
