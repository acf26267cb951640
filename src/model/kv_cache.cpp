#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace shoal {

DType parse_kv_type(const std::string& name) {
  if (name == "f32") return DType::F32;
  if (name == "f16") return DType::F16;
  if (name == "q8_0") return DType::Q8_0;
  fail("KV cache type '{}' is not one of f32, f16, q8_0", name);
}

std::string kv_type_name(DType type) {
  switch (type) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::Q8_0: return "q8_0";
    default: return std::string(dtype_info(type).name);
  }
}

void check_kv_types(const KvTypes& types, const ModelConfig& config) {
  for (DType t : {types.k, types.v}) {
    if (t != DType::F32 && t != DType::F16 && t != DType::Q8_0)
      fail("KV cache type {} is not one of f32, f16, q8_0", dtype_info(t).name);
    // A Q8_0 block must not straddle two heads: attention reads one head's slice.
    if (t == DType::Q8_0 && config.head_dim % 32 != 0)
      fail("a q8_0 KV cache needs a head size that is a multiple of 32 (this model's is {}): use f16 or f32",
           config.head_dim);
  }
}


int KvCache::positions_for(const ModelConfig& c, int layer, int n_ctx, int max_tokens) {
  if (c.recurrent(layer)) return 0;  // a DeltaNet layer keeps a state instead (model/recurrent_state.h)
  const int64_t window = c.layers.at(layer).window;
  return window > 0 ? static_cast<int>(std::min<int64_t>(n_ctx, window + max_tokens)) : n_ctx;
}

int KvCache::max_rollback(const ModelConfig& c, int n_ctx, int max_tokens) {
  if (c.has_recurrent_layers()) return 0;  // a recurrent state cannot go back
  int most = INT_MAX;
  for (int l = 0; l < c.n_layer; ++l) {
    const int held = positions_for(c, l, n_ctx, max_tokens);
    if (held < n_ctx) most = std::min(most, held - c.layers[l].window);
  }
  return most;
}

namespace {
// How many of each layer's KV heads a cache holds (kv_heads 0: all).
int heads_held(const ModelConfig& c, int kv_heads) { return kv_heads > 0 ? kv_heads : c.n_head_kv; }
}  // namespace

size_t KvCache::bytes_for(const ModelConfig& c, int begin, int end, int n_seq, int n_ctx, int max_tokens,
                          KvTypes types, int kv_heads) {
  size_t positions = 0;
  for (int l = begin; l < end; ++l) positions += static_cast<size_t>(positions_for(c, l, n_ctx, max_tokens));
  const int held = heads_held(c, kv_heads);
  // Rows in whole words: the most a backend pads them (Backend::kv_row_stride).
  auto padded = [](size_t bytes) { return (bytes + 3) & ~size_t{3}; };
  return positions * n_seq *
         (padded(row_bytes(types.k, c.kv_width() / c.n_head_kv * held)) +
          padded(row_bytes(types.v, c.kv_v_width() / c.n_head_kv * held)));
}

KvCache::KvCache(Backend& backend, const ModelConfig& config, int begin, int end, int n_seq, int n_ctx,
                 int max_tokens, KvTypes types, int kv_heads, int recurrent_rewind)
    : backend_(backend),
      n_seq_(n_seq),
      n_ctx_(n_ctx),
      width_(config.kv_width() / config.n_head_kv * heads_held(config, kv_heads)),
      rollback_(config.has_recurrent_layers() ? recurrent_rewind : max_rollback(config, n_ctx, max_tokens)),
      recurrent_(config.has_recurrent_layers()),
      v_in_k_(config.latent_attention()),
      types_(types),
      k_row_bytes_(0),
      v_row_bytes_(0),
      lengths_(n_seq, 0) {
  if (begin < 0 || end > config.n_layer || begin >= end)
    fail("bad layer range [{}, {}) for a model of {} layers", begin, end, config.n_layer);
  check_kv_types(types, config);
  k_row_bytes_ = backend.kv_row_stride(row_bytes(types.k, width_));
  v_row_bytes_ = backend.kv_row_stride(row_bytes(types.v, config.kv_v_width() / config.n_head_kv * heads_held(config, kv_heads)));
  for (int l = begin; l < end; ++l) {
    const int positions = positions_for(config, l, n_ctx, max_tokens);
    layers_.push_back({positions, positions < n_ctx});
    const size_t rows = static_cast<size_t>(positions) * n_seq;
    total_positions_ += rows;
    k_.push_back(rows ? backend.allocate(rows * k_row_bytes_) : nullptr);
    v_.push_back(rows && !v_in_k_ ? backend.allocate(rows * v_row_bytes_) : nullptr);
  }
}

KvLayer KvCache::layer(int index) const {
  const Layer& l = layers_[index];
  if (!k_[index]) fail("internal: layer {} of the stage has no KV cache", index);
  KvLayer view;
  view.k = DevicePtr{k_[index].get(), 0};
  view.v = DevicePtr{v_[index].get(), 0};
  view.k_type = types_.k;
  view.v_type = types_.v;
  view.k_row_bytes = k_row_bytes_;
  view.v_row_bytes = v_row_bytes_;
  view.k_seq_stride = static_cast<size_t>(l.positions) * k_row_bytes_;
  view.v_seq_stride = static_cast<size_t>(l.positions) * v_row_bytes_;
  view.width = width_;
  view.ring = l.ring ? l.positions : 0;
  if (v_in_k_) {  // V reads the latent at the front of each K row
    view.v = view.k;
    view.v_type = view.k_type;
    view.v_row_bytes = view.k_row_bytes;
    view.v_seq_stride = view.k_seq_stride;
    view.v_in_k = true;
  }
  return view;
}

void KvCache::admit(const int32_t* seq_ids, const int32_t* positions, int n_tokens) {
  std::vector<int>& next = next_lengths_;  // sized once: no allocation per step
  next = lengths_;
  for (int t = 0; t < n_tokens; ++t) {
    const int s = seq_ids[t], p = positions[t];
    if (s < 0 || s >= n_seq_) fail("sequence id {} is outside 0..{}", s, n_seq_ - 1);
    if (p < 0 || p >= n_ctx_) fail("position {} is outside the context of {} tokens", p, n_ctx_);
    if (p > next[s]) fail("position {} of sequence {} leaves a gap after {} cached positions", p, s, next[s]);
    // Writing at a position ends the sequence there (a speculative guess
    // that was wrong is overwritten by what comes instead), as far back as
    // a cut may go.
    check_cut(s, next[s], p);
    next[s] = p + 1;
  }
  lengths_.swap(next);
}

void KvCache::truncate(int seq, int n_pos) {
  if (seq < 0 || seq >= n_seq_) fail("sequence id {} is outside 0..{}", seq, n_seq_ - 1);
  n_pos = std::clamp(n_pos, 0, lengths_[seq]);
  check_cut(seq, lengths_[seq], n_pos);
  lengths_[seq] = n_pos;
}

// A windowed layer has overwritten what lies further back than rollback_,
// and a recurrent state (rollback_ 0) holds every position so far: a
// sequence may start again or go back that far, no further.
void KvCache::check_cut(int seq, int length, int n_pos) const {
  if (n_pos > 0 && length - n_pos > rollback_)
    fail("sequence {} cannot go back from {} to {} positions without losing {} (at most {})", seq, length, n_pos,
         recurrent_ ? "its recurrent state" : "its sliding window", rollback_);
}

}  // namespace shoal
