#pragma once
// The model's tensors bound to their roles, with shapes checked against the
// config. Views point into the mapped file (or, on a worker, into received
// or cached buffers); nothing is copied.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/tensor_names.h"
#include "tensor/matrix.h"

namespace shoal {

class ThreadPool;
namespace gguf { class File; }

// One layer's tensors by kind; those the layer does not have are empty.
// Expert tensors are [n_expert * rows][cols]: expert e's rows follow e-1's.
struct LayerWeights {
  std::array<Matrix, kLayerKindCount> tensors;
  const Matrix& operator[](TensorKind k) const { return tensors[layer_slot(k)]; }
  Matrix& operator[](TensorKind k) { return tensors[layer_slot(k)]; }
};

struct ModelWeights {
  Matrix token_embd;          // [n_vocab][n_embd]; empty on a worker
  Matrix output_norm;         // [n_embd] f32; empty on a worker
  Matrix output;              // [n_vocab][n_embd]; token_embd when tied; empty on a worker
  Matrix rope_freqs;          // [rope_dim / 2] f32 or empty
  std::vector<LayerWeights> layers;  // n_layer entries; those outside the bound range are empty
  std::vector<std::unique_ptr<uint8_t[]>> owned;  // copies made at load (rows in groups of eight)
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
};

// The names of the tensors a range needs, in a fixed order.
std::vector<std::string> tensor_names_for(const ModelConfig& config, const BindRange& range);

// Binds every tensor the range needs; throws naming a missing tensor or a
// wrong shape. `source` names the origin in messages (a file path).
ModelWeights bind_weights(const TensorLookup& lookup, const std::string& source, const ModelConfig& config,
                          const BindRange& range = {});
ModelWeights bind_weights(const gguf::File& file, const ModelConfig& config, const BindRange& range = {});

// The bytes group_rows_for_cpu would copy: the layer matrices (and the
// output head, tied to the embedding or not) whose type has a layout in
// groups of eight rows, when this CPU's matmul reads it; 0 otherwise.
uint64_t groupable_bytes(const ModelWeights& w, const ModelConfig& config, const BindRange& range);
// Copies those matrices into groups of eight rows (tensor/interleave.h), in
// buffers `w` keeps, on the pool's threads (the copy's cost is mostly the
// first touch of fresh pages); the views then point there. Speed only: the
// matmul gives the same bits either way. Returns the bytes copied.
uint64_t group_rows_for_cpu(ModelWeights& w, const ModelConfig& config, const BindRange& range, ThreadPool& pool);

}  // namespace shoal
