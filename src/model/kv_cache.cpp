#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace shoal {

KvCache::KvCache(int n_layers, int n_seq, int n_ctx, int width)
    : n_layers_(n_layers), n_seq_(n_seq), n_ctx_(n_ctx), width_(width), lengths_(n_seq, 0) {
  const size_t n = static_cast<size_t>(n_layers) * layer_floats();
  k_.reset(new float[n]);
  v_.reset(new float[n]);
}

KvLayerView KvCache::layer(int index) {
  const size_t off = static_cast<size_t>(index) * layer_floats();
  return KvLayerView{k_.get() + off, v_.get() + off, static_cast<int64_t>(n_ctx_) * width_, width_};
}

void KvCache::store(int layer_index, const float* k, const float* v, const int32_t* seq_ids,
                    const int32_t* positions, int n_tokens) {
  KvLayerView view = layer(layer_index);
  for (int t = 0; t < n_tokens; ++t) {
    const size_t off = static_cast<size_t>(seq_ids[t]) * view.seq_stride + static_cast<size_t>(positions[t]) * width_;
    std::memcpy(view.k + off, k + static_cast<size_t>(t) * width_, width_ * sizeof(float));
    std::memcpy(view.v + off, v + static_cast<size_t>(t) * width_, width_ * sizeof(float));
  }
}

void KvCache::admit(const int32_t* seq_ids, const int32_t* positions, int n_tokens) {
  std::vector<int> next = lengths_;
  for (int t = 0; t < n_tokens; ++t) {
    const int s = seq_ids[t], p = positions[t];
    if (s < 0 || s >= n_seq_) fail("sequence id {} is outside 0..{}", s, n_seq_ - 1);
    if (p < 0 || p >= n_ctx_) fail("position {} is outside the context of {} tokens", p, n_ctx_);
    if (p > next[s]) fail("position {} of sequence {} leaves a gap after {} cached positions", p, s, next[s]);
    next[s] = std::max(next[s], p + 1);
  }
  lengths_ = std::move(next);
}

void KvCache::truncate(int seq, int n_pos) {
  if (seq < 0 || seq >= n_seq_) fail("sequence id {} is outside 0..{}", seq, n_seq_ - 1);
  lengths_[seq] = std::clamp(n_pos, 0, lengths_[seq]);
}

void KvCache::copy(int src, int dst, int n_pos) {
  if (src < 0 || src >= n_seq_ || dst < 0 || dst >= n_seq_) fail("sequence copy {} -> {} out of range", src, dst);
  n_pos = std::clamp(n_pos, 0, lengths_[src]);
  for (int l = 0; l < n_layers_; ++l) {
    KvLayerView view = layer(l);
    const size_t bytes = static_cast<size_t>(n_pos) * width_ * sizeof(float);
    std::memcpy(view.k + dst * view.seq_stride, view.k + src * view.seq_stride, bytes);
    std::memcpy(view.v + dst * view.seq_stride, view.v + src * view.seq_stride, bytes);
  }
  lengths_[dst] = n_pos;
}

}  // namespace shoal
