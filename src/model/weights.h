#pragma once
// The model's tensors bound to their roles, with shapes checked against the
// config. Views point into the mapped file (or, on a worker, into received
// or cached buffers); nothing is copied.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/tensor_split_shares.h"
#include "model/config.h"
#include "model/tensor_names.h"
#include "tensor/matrix.h"

namespace shoal {

namespace gguf { class File; }

// One layer's tensors by kind; those the layer does not have are empty.
// Expert tensors are [n_expert * rows][cols]: expert e's rows follow e-1's.
struct LayerWeights {
  std::array<Matrix, kLayerKindCount> tensors;
  const Matrix& operator[](TensorKind k) const { return tensors[layer_slot(k)]; }
  Matrix& operator[](TensorKind k) { return tensors[layer_slot(k)]; }
};

// Slice i of a stacked [n * rows][cols] tensor (an expert, or a head's
// matrix under latent attention). Groups of eight rows never straddle two
// slices (weights.cpp groups a stacked tensor only when each slice's rows
// are whole groups).
inline Matrix stacked_slice(const Matrix& m, int i, int64_t rows) {
  return Matrix{m.type, m.data + static_cast<size_t>(i) * rows * m.row_stride(), rows, m.cols, m.interleaved};
}

struct ModelWeights {
  Matrix token_embd;          // [n_vocab][n_embd]; empty on a worker
  Matrix output_norm;         // [n_embd] f32; empty on a worker
  Matrix output;              // [n_vocab][n_embd]; token_embd when tied; empty on a worker
  Matrix rope_freqs;          // [rope_dim / 2] f32 or empty
  // Per-layer inputs (gemma4 E2B/E4B), with the embedding: each token's
  // rows for every layer [n_vocab][side_width], the projection of its
  // embedding to them [side_width][n_embd], and their norm [n_embd_per_layer].
  Matrix per_layer_token_embd, per_layer_model_proj, per_layer_proj_norm;
  std::vector<LayerWeights> layers;  // n_layer entries; those outside the bound range are empty
  PreparedMemory owned;  // what the backend made at load (the CPU: rows in groups of eight)
};

// A tensor as the binder sees it: GGUF shape order (shape[0] = row length).
struct TensorRef {
  DType type = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
};
// Finds a tensor by GGUF name; nullptr when absent.
using TensorLookup = std::function<const TensorRef*(const std::string& name)>;

// What part of the model to bind.
struct BindRange {
  int layer_begin = 0;
  int layer_end = -1;       // -1: all layers
  bool with_head = true;    // embedding, output norm and output (the primary's part)
  bool embedding = true;    // with the head: the embedding lookup too (a worker that runs the head needs
                            // only the output matrix, which a tied embedding is)
};

// The names of the tensors a range needs, in a fixed order.
std::vector<std::string> tensor_names_for(const ModelConfig& config, const BindRange& range);
// For each of those tensors: the rows member `rank` of a tensor group
// shared by `weights` computes (TensorSplitBackend's share), or nullopt for a
// tensor every member reads whole. What a member must hold of each.
std::vector<std::optional<RowShare>> tensor_shares(const ModelConfig& config, const BindRange& range, int rank,
                                                   const ShareWeights& weights);

// Attention's heads as a tensor group would divide them; none for latent
// attention (its heads are read through the latent, and stay whole).
AttentionHeads attention_heads(const ModelConfig& config);
// How many KV heads member `rank` of a group shared by `weights` caches
// (0: all of each layer's, where the group does not divide attention by heads).
int kv_heads_held(const ModelConfig& config, int rank, const ShareWeights& weights);

// Binds every tensor the range needs; throws naming a missing tensor or a
// wrong shape. `source` names the origin in messages (a file path).
ModelWeights bind_weights(const TensorLookup& lookup, const std::string& source, const ModelConfig& config,
                          const BindRange& range = {});
ModelWeights bind_weights(const gguf::File& file, const ModelConfig& config, const BindRange& range = {});

// Hands the matrices of layers [range) and, with range.with_head, the
// output norm and head to the backend to prepare (Backend::prepare_weights);
// `w` keeps what it made. Returns the bytes it added.
uint64_t prepare_weights(Backend& backend, ModelWeights& w, const ModelConfig& config, const BindRange& range);
// What prepare_weights would add, for memory planning.
uint64_t prepared_bytes(const Backend& backend, ModelWeights& w, const ModelConfig& config, const BindRange& range);

}  // namespace shoal
