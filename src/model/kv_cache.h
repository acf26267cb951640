#pragma once
// The KV cache of a range of layers: for each layer, K and V for every
// sequence slot and position, f32. Positions of a sequence fill from 0 with
// no gaps; the cache tracks each sequence's length to refuse a gap.
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"

namespace shoal {

class KvCache {
 public:
  // n_layers layers of n_seq sequences x n_ctx positions x width floats.
  KvCache(int n_layers, int n_seq, int n_ctx, int width);

  int n_seq() const { return n_seq_; }
  int n_ctx() const { return n_ctx_; }
  size_t bytes() const { return static_cast<size_t>(n_layers_) * 2 * layer_floats() * sizeof(float); }
  static size_t bytes_for(int n_layers, int n_seq, int n_ctx, int width) {
    return static_cast<size_t>(n_layers) * 2 * n_seq * static_cast<size_t>(n_ctx) * width * sizeof(float);
  }

  KvLayerView layer(int index);
  // Writes rows k[t], v[t] ([n_tokens][width]) at (seq_ids[t], positions[t]).
  void store(int layer, const float* k, const float* v, const int32_t* seq_ids, const int32_t* positions,
             int n_tokens);

  // Checks that a batch extends its sequences without gaps and fits; throws
  // shoal::Error otherwise. Then records the new lengths.
  void admit(const int32_t* seq_ids, const int32_t* positions, int n_tokens);
  int length(int seq) const { return lengths_.at(seq); }
  void truncate(int seq, int n_pos);  // keep positions [0, n_pos)
  void copy(int src, int dst, int n_pos);  // dst becomes src's first n_pos positions

 private:
  size_t layer_floats() const { return static_cast<size_t>(n_seq_) * n_ctx_ * width_; }
  int n_layers_, n_seq_, n_ctx_, width_;
  std::unique_ptr<float[]> k_, v_;  // uninitialised: pages are touched only as positions fill
  std::vector<int> lengths_;
};

}  // namespace shoal
