#pragma once
// The KV cache of a range of layers: for each layer, K and V for every
// sequence slot and position, each in its own type (KvTypes: F16 by default,
// as llama.cpp; F32 or Q8_0 on request; latent attention caches K rows
// only, its V being their latent part). Positions of a sequence fill from 0 with
// no gaps; the cache tracks each sequence's length to refuse a gap.
//
// A layer that attends through a sliding window keeps only the positions it
// can still see: a ring of window + max_tokens positions per sequence
// (position p in slot p % ring). The extra max_tokens let one batch write
// all its rows before any of them attends, and bound how far a sequence may
// be cut back (max_rollback) with its window intact.
#include <climits>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"

namespace shoal {

// The element types of the cache, as llama.cpp's -ctk / -ctv choose them.
struct KvTypes {
  DType k = DType::F16;
  DType v = DType::F16;
  bool operator==(const KvTypes&) const = default;
};
// "f32", "f16" or "q8_0" (llama.cpp's spelling) -> the type; throws otherwise.
DType parse_kv_type(const std::string& name);
std::string kv_type_name(DType type);
// Throws unless both types are allowed and the model's heads fit their blocks.
void check_kv_types(const KvTypes& types, const ModelConfig& config);

class KvCache {
 public:
  // Layers [begin, end) of the model, n_seq sequences of up to n_ctx
  // positions, in the backend's memory (written by Backend::kv_store).
  // kv_heads: how many of each layer's KV heads it holds (0: all; a tensor
  // group member dividing attention by heads: its share's, weights.h).
  // recurrent_rewind: with DeltaNet layers, how far a sequence may go back
  // (the stage's recurrent state takes the last step back; 0: not at all).
  KvCache(Backend& backend, const ModelConfig& config, int begin, int end, int n_seq, int n_ctx, int max_tokens,
          KvTypes types, int kv_heads = 0, int recurrent_rewind = 0);

  int n_seq() const { return n_seq_; }
  int n_ctx() const { return n_ctx_; }
  size_t bytes() const { return bytes_; }
  // kv_heads: how many of each layer's KV heads are held (0: all).
  static size_t bytes_for(const ModelConfig& config, int begin, int end, int n_seq, int n_ctx, int max_tokens,
                          KvTypes types, int kv_heads = 0);
  // Positions per sequence that layer `layer` of the model keeps.
  static int positions_for(const ModelConfig& config, int layer, int n_ctx, int max_tokens);
  // How many positions a sequence may be cut back by (truncate) and still
  // extend correctly: unlimited (INT_MAX) without windowed layers.
  static int max_rollback(const ModelConfig& config, int n_ctx, int max_tokens);

  KvLayer layer(int index) const;

  // Checks that a batch extends its sequences without gaps and fits; throws
  // shoal::Error otherwise. Then records the new lengths: a row written at a
  // position ends its sequence there (what lay beyond it is overwritten as
  // the sequence goes on, within max_rollback).
  void admit(const int32_t* seq_ids, const int32_t* positions, int n_tokens);
  int length(int seq) const { return lengths_.at(seq); }
  void truncate(int seq, int n_pos);  // keep positions [0, n_pos); throws past max_rollback

  // A sequence's cached rows of layer `index` as bytes, to move them to a
  // stage on another device (the same model and cache types): positions
  // [first, length) — a windowed layer's that it still holds, else all —
  // as a u32 `first`, then the K rows, then the V rows, each row its
  // unpadded bytes. Empty for a layer that reads an earlier one's cache.
  std::vector<uint8_t> read_rows(int index, int seq) const;
  // The reverse, into a sequence slot: its content becomes those rows, its
  // length `length`. Throws naming what does not match (a different model,
  // cache type or length).
  void write_rows(int index, int seq, int length, std::span<const uint8_t> bytes);
  // After write_rows of every layer: the sequence holds `length` positions.
  void set_length(int seq, int length);

 private:
  // Throws unless a sequence of `length` positions may go back to n_pos.
  void check_cut(int seq, int length, int n_pos) const;
  struct Layer {
    int positions;  // per sequence
    bool ring;
    int width;      // K values per row (the layer's geometry: model/config.h)
    size_t k_row_bytes, v_row_bytes;
    int source;     // >= 0: the index of the layer whose cache it reads (ModelConfig::kv_source)
  };
  Backend& backend_;
  int n_seq_, n_ctx_, rollback_;
  bool recurrent_;  // the model has DeltaNet layers: positions only go on or start again
  bool v_in_k_;     // latent attention: no V rows (model/config.h)
  KvTypes types_;
  std::vector<Layer> layers_;
  size_t bytes_ = 0;  // over layers and sequences
  // One buffer per layer for K and one for V: a GPU may bind only so many
  // bytes at once (maxStorageBufferRange), and one layer's cache stays well
  // below what the whole cache of a long context would need.
  std::vector<std::unique_ptr<Buffer>> k_, v_;
  std::vector<int> lengths_;
  std::vector<int> next_lengths_;  // admit()'s scratch
};

}  // namespace shoal
