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
    for (int head_dim : {config.head_dim, config.window_geometry.head_dim})  // 0 where the layers share one
      if (t == DType::Q8_0 && head_dim % 32 != 0)
        fail("a q8_0 KV cache needs a head size that is a multiple of 32 (this model's is {}): use f16 or f32",
             head_dim);
  }
}

int KvCache::positions_for(const ModelConfig& c, int layer, int n_ctx, int max_tokens) {
  if (c.recurrent(layer)) return 0;  // a DeltaNet layer keeps a state instead (model/recurrent_state.h)
  if (c.kv_source(layer) >= 0) return 0;  // it reads an earlier layer's (gemma4 E2B/E4B)
  const int64_t window = c.layers.at(layer).window;
  return window > 0 ? static_cast<int>(std::min<int64_t>(n_ctx, window + max_tokens)) : n_ctx;
}

int KvCache::max_rollback(const ModelConfig& c, int n_ctx, int max_tokens) {
  if (c.has_recurrent_layers()) return 0;  // a recurrent state cannot go back
  int most = INT_MAX;
  for (int l = 0; l < c.n_layer; ++l) {
    if (c.kv_source(l) >= 0) continue;  // holds nothing of its own
    const int held = positions_for(c, l, n_ctx, max_tokens);
    if (held < n_ctx) most = std::min(most, held - c.layers[l].window);
  }
  return most;
}

namespace {
// The K and V values per cached row of one layer: its KV heads' (kv_heads
// of them when a tensor group member holds a share; 0: all).
struct RowWidths {
  int k, v;
};
RowWidths row_widths(const ModelConfig& c, int layer, int kv_heads) {
  const AttentionGeometry g = c.attention_of(layer);
  const int held = kv_heads > 0 ? kv_heads : g.n_head_kv;
  return {g.head_dim * held, c.latent_attention() ? 0 : g.head_dim * held};
}
}  // namespace

size_t KvCache::bytes_for(const ModelConfig& c, int begin, int end, int n_seq, int n_ctx, int max_tokens,
                          KvTypes types, int kv_heads) {
  // Rows in whole words: the most a backend pads them (Backend::kv_row_stride).
  auto padded = [](size_t bytes) { return (bytes + 3) & ~size_t{3}; };
  size_t bytes = 0;
  for (int l = begin; l < end; ++l) {
    const RowWidths w = row_widths(c, l, kv_heads);
    bytes += static_cast<size_t>(positions_for(c, l, n_ctx, max_tokens)) * n_seq *
             (padded(row_bytes(types.k, w.k)) + padded(row_bytes(types.v, w.v)));
  }
  return bytes;
}

KvCache::KvCache(Backend& backend, const ModelConfig& config, int begin, int end, int n_seq, int n_ctx,
                 int max_tokens, KvTypes types, int kv_heads, int recurrent_rewind)
    : backend_(backend),
      n_seq_(n_seq),
      n_ctx_(n_ctx),
      rollback_(config.has_recurrent_layers() ? recurrent_rewind : max_rollback(config, n_ctx, max_tokens)),
      recurrent_(config.has_recurrent_layers()),
      v_in_k_(config.latent_attention()),
      types_(types),
      lengths_(n_seq, 0) {
  if (begin < 0 || end > config.n_layer || begin >= end)
    fail("bad layer range [{}, {}) for a model of {} layers", begin, end, config.n_layer);
  check_kv_types(types, config);
  for (int l = begin; l < end; ++l) {
    const int positions = positions_for(config, l, n_ctx, max_tokens);
    const RowWidths w = row_widths(config, l, kv_heads);
    const size_t k_row = backend.kv_row_stride(row_bytes(types.k, w.k));
    const size_t v_row = backend.kv_row_stride(row_bytes(types.v, w.v));
    const int source = config.kv_source(l);
    if (source >= 0 && source < begin)
      fail("layer {} reads layer {}'s KV cache, which this stage (layers {}-{}) does not hold: a split must not cut "
           "between them",
           l, source, begin, end - 1);
    layers_.push_back({positions, positions < n_ctx, w.k, k_row, v_row, source >= 0 ? source - begin : -1});
    const size_t rows = static_cast<size_t>(positions) * n_seq;
    bytes_ += rows * (k_row + v_row);
    k_.push_back(rows ? backend.allocate(rows * k_row) : nullptr);
    v_.push_back(rows && !v_in_k_ ? backend.allocate(rows * v_row) : nullptr);
  }
}

KvLayer KvCache::layer(int index) const {
  if (layers_[index].source >= 0) return layer(layers_[index].source);  // an earlier layer's cache, read only
  const Layer& l = layers_[index];
  if (!k_[index]) fail("internal: layer {} of the stage has no KV cache", index);
  KvLayer view;
  view.k = DevicePtr{k_[index].get(), 0};
  view.v = DevicePtr{v_[index].get(), 0};
  view.k_type = types_.k;
  view.v_type = types_.v;
  view.k_row_bytes = l.k_row_bytes;
  view.v_row_bytes = l.v_row_bytes;
  view.k_seq_stride = static_cast<size_t>(l.positions) * l.k_row_bytes;
  view.v_seq_stride = static_cast<size_t>(l.positions) * l.v_row_bytes;
  view.width = l.width;
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

namespace {
// Rows [first, first + n) of one sequence's K (or V) buffer, unpadded,
// to or from `bytes`: a ring's slots in up to two runs; row by row where
// the backend pads its rows.
template <class Move>
void each_run(size_t row, size_t stride, int slots, bool ring, int first, int n, Move move) {
  int done = 0;
  while (done < n) {
    const int pos = first + done, slot = ring ? pos % slots : pos;
    const int run = stride == row ? std::min(n - done, slots - slot) : 1;
    move(static_cast<size_t>(slot) * stride, static_cast<size_t>(done) * row, static_cast<size_t>(run) * row);
    done += run;
  }
}
}  // namespace

std::vector<uint8_t> KvCache::read_rows(int index, int seq) const {
  const Layer& l = layers_.at(index);
  if (l.source >= 0 || !k_[index]) return {};
  if (seq < 0 || seq >= n_seq_) fail("sequence id {} is outside 0..{}", seq, n_seq_ - 1);
  const int length = lengths_[seq], first = l.ring ? std::max(0, length - l.positions) : 0, n = length - first;
  const KvLayer view = layer(index);
  const size_t k_row = row_bytes(types_.k, l.width), v_row = v_in_k_ ? 0 : row_bytes(types_.v, l.width);
  std::vector<uint8_t> bytes(4 + static_cast<size_t>(n) * (k_row + v_row));
  const uint32_t first_u32 = static_cast<uint32_t>(first);
  std::memcpy(bytes.data(), &first_u32, 4);
  uint8_t* k_out = bytes.data() + 4;
  uint8_t* v_out = k_out + static_cast<size_t>(n) * k_row;
  each_run(k_row, l.k_row_bytes, l.positions, l.ring, first, n, [&](size_t at, size_t out, size_t size) {
    backend_.download(k_out + out, view.k.bytes(seq * view.k_seq_stride + at), size);
  });
  if (v_row > 0)
    each_run(v_row, l.v_row_bytes, l.positions, l.ring, first, n, [&](size_t at, size_t out, size_t size) {
      backend_.download(v_out + out, view.v.bytes(seq * view.v_seq_stride + at), size);
    });
  return bytes;
}

void KvCache::write_rows(int index, int seq, int length, std::span<const uint8_t> bytes) {
  const Layer& l = layers_.at(index);
  if (l.source >= 0 || !k_[index]) {
    if (!bytes.empty()) fail("a cache of {} bytes for a layer that holds none", bytes.size());
    return;
  }
  if (seq < 0 || seq >= n_seq_) fail("sequence id {} is outside 0..{}", seq, n_seq_ - 1);
  if (length < 0 || length > n_ctx_) fail("a cache of {} positions for a context of {}", length, n_ctx_);
  uint32_t first = 0;
  if (bytes.size() >= 4) std::memcpy(&first, bytes.data(), 4);
  const size_t k_row = row_bytes(types_.k, l.width), v_row = v_in_k_ ? 0 : row_bytes(types_.v, l.width);
  if (bytes.size() < 4 || first > static_cast<uint32_t>(length) || (first > 0 && !l.ring) ||
      bytes.size() != 4 + (length - first) * (k_row + v_row))
    fail("a cache of {} bytes is not {} positions of this layer's rows ({} + {} bytes each, in {}/{})", bytes.size(),
         length, k_row, v_row, kv_type_name(types_.k), kv_type_name(types_.v));
  // Oldest first: in a smaller ring the later rows overwrite what it cannot hold.
  const int n = length - static_cast<int>(first);
  const KvLayer view = layer(index);
  const uint8_t* k_in = bytes.data() + 4;
  const uint8_t* v_in = k_in + static_cast<size_t>(n) * k_row;
  each_run(k_row, l.k_row_bytes, l.positions, l.ring, first, n, [&](size_t at, size_t in, size_t size) {
    backend_.upload(view.k.bytes(seq * view.k_seq_stride + at), k_in + in, size);
  });
  if (v_row > 0)
    each_run(v_row, l.v_row_bytes, l.positions, l.ring, first, n, [&](size_t at, size_t in, size_t size) {
      backend_.upload(view.v.bytes(seq * view.v_seq_stride + at), v_in + in, size);
    });
}

void KvCache::set_length(int seq, int length) {
  if (seq < 0 || seq >= n_seq_) fail("sequence id {} is outside 0..{}", seq, n_seq_ - 1);
  if (length < 0 || length > n_ctx_) fail("a cache of {} positions for a context of {}", length, n_ctx_);
  lengths_[seq] = length;
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
