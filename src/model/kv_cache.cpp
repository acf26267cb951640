#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace shoal {

int KvCache::positions_for(const ModelConfig& c, int layer, int n_ctx, int max_tokens) {
  const int64_t window = c.layers.at(layer).window;
  return window > 0 ? static_cast<int>(std::min<int64_t>(n_ctx, window + max_tokens)) : n_ctx;
}

int KvCache::max_rollback(const ModelConfig& c, int n_ctx, int max_tokens) {
  int most = INT_MAX;
  for (int l = 0; l < c.n_layer; ++l) {
    const int held = positions_for(c, l, n_ctx, max_tokens);
    if (held < n_ctx) most = std::min(most, held - c.layers[l].window);
  }
  return most;
}

size_t KvCache::bytes_for(const ModelConfig& c, int begin, int end, int n_seq, int n_ctx, int max_tokens) {
  size_t positions = 0;
  for (int l = begin; l < end; ++l) positions += static_cast<size_t>(positions_for(c, l, n_ctx, max_tokens));
  return 2 * positions * n_seq * c.kv_width() * sizeof(float);
}

KvCache::KvCache(const ModelConfig& config, int begin, int end, int n_seq, int n_ctx, int max_tokens)
    : n_seq_(n_seq), n_ctx_(n_ctx), width_(config.kv_width()), rollback_(max_rollback(config, n_ctx, max_tokens)),
      lengths_(n_seq, 0) {
  if (begin < 0 || end > config.n_layer || begin >= end)
    fail("bad layer range [{}, {}) for a model of {} layers", begin, end, config.n_layer);
  for (int l = begin; l < end; ++l) {
    const int positions = positions_for(config, l, n_ctx, max_tokens);
    layers_.push_back({total_positions_ * width_, positions, positions < n_ctx});
    total_positions_ += static_cast<size_t>(positions) * n_seq;
  }
  k_.reset(new float[total_positions_ * width_]);
  v_.reset(new float[total_positions_ * width_]);
}

KvLayerView KvCache::layer(int index) {
  const Layer& l = layers_[index];
  return KvLayerView{k_.get() + l.offset, v_.get() + l.offset, static_cast<int64_t>(l.positions) * width_, width_,
                     l.ring ? l.positions : 0};
}

void KvCache::store(int layer_index, const float* k, const float* v, const int32_t* seq_ids,
                    const int32_t* positions, int n_tokens) {
  KvLayerView view = layer(layer_index);
  for (int t = 0; t < n_tokens; ++t) {
    const size_t off = static_cast<size_t>(seq_ids[t]) * view.seq_stride + view.slot(positions[t]) * width_;
    std::memcpy(view.k + off, k + static_cast<size_t>(t) * width_, width_ * sizeof(float));
    std::memcpy(view.v + off, v + static_cast<size_t>(t) * width_, width_ * sizeof(float));
  }
}

void KvCache::admit(const int32_t* seq_ids, const int32_t* positions, int n_tokens) {
  std::vector<int>& next = next_lengths_;  // sized once: no allocation per step
  next = lengths_;
  for (int t = 0; t < n_tokens; ++t) {
    const int s = seq_ids[t], p = positions[t];
    if (s < 0 || s >= n_seq_) fail("sequence id {} is outside 0..{}", s, n_seq_ - 1);
    if (p < 0 || p >= n_ctx_) fail("position {} is outside the context of {} tokens", p, n_ctx_);
    if (p > next[s]) fail("position {} of sequence {} leaves a gap after {} cached positions", p, s, next[s]);
    next[s] = std::max(next[s], p + 1);
  }
  lengths_.swap(next);
}

void KvCache::truncate(int seq, int n_pos) {
  if (seq < 0 || seq >= n_seq_) fail("sequence id {} is outside 0..{}", seq, n_seq_ - 1);
  n_pos = std::clamp(n_pos, 0, lengths_[seq]);
  // A windowed layer has overwritten what lies further back than this.
  if (n_pos > 0 && lengths_[seq] - n_pos > rollback_)
    fail("internal: cutting sequence {} back from {} to {} positions loses its sliding window (at most {})", seq,
         lengths_[seq], n_pos, rollback_);
  lengths_[seq] = n_pos;
}

void KvCache::copy(int src, int dst, int n_pos) {
  if (src < 0 || src >= n_seq_ || dst < 0 || dst >= n_seq_) fail("sequence copy {} -> {} out of range", src, dst);
  n_pos = std::clamp(n_pos, 0, lengths_[src]);
  if (n_pos > 0 && lengths_[src] - n_pos > rollback_)
    fail("internal: copying {} of sequence {}'s {} positions loses its sliding window", n_pos, src, lengths_[src]);
  for (size_t l = 0; l < layers_.size(); ++l) {
    KvLayerView view = layer(static_cast<int>(l));
    const size_t bytes = static_cast<size_t>(std::min(n_pos, layers_[l].positions)) * width_ * sizeof(float);
    std::memcpy(view.k + dst * view.seq_stride, view.k + src * view.seq_stride, bytes);
    std::memcpy(view.v + dst * view.seq_stride, view.v + src * view.seq_stride, bytes);
  }
  lengths_[dst] = n_pos;
}

}  // namespace shoal
