#pragma once
// Hyperparameters of a model, read from GGUF metadata as llama.cpp reads
// them. Architectures differ only in the data here (model/architecture.h
// picks the layer's tensors and block variants), never in copied layer code.
#include <algorithm>
#include <string>
#include <vector>

#include "model/architecture.h"

namespace shoal {
namespace gguf { class File; }

// What may differ from layer to layer (Gemma 3: sliding-window local layers
// with their own rope base, a global layer every sixth).
struct LayerSettings {
  int window = 0;  // attend to the last `window` positions (this one included); 0: all
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // linear position scaling: pos * scale
};

struct ModelConfig {
  std::string arch;     // general.architecture
  std::string name;     // general.name, for display
  int n_layer = 0;
  int n_embd = 0;       // width of the residual stream
  int n_head = 0;
  int n_head_kv = 0;    // < n_head: grouped-query attention
  int head_dim = 0;     // n_embd / n_head unless the file says otherwise
  int n_ff = 0;         // feed-forward width (dense layers)
  int n_vocab = 0;
  int n_ctx_train = 0;
  int rope_dim = 0;     // leading dims of each head that rotate
  RopeStyle rope_style = RopeStyle::Interleaved;
  Activation activation = Activation::Silu;
  float norm_eps = 1e-5f;
  float attn_scale = 0.0f;     // q·k scale (1/sqrt(head_dim) unless the format says otherwise)
  float embd_scale = 1.0f;     // embeddings are multiplied by this (gemma: sqrt(n_embd))
  float logit_softcap = 0.0f;  // logits = cap * tanh(logits / cap) when > 0
  bool tied_output = false;    // no output.weight: the head reuses token_embd
  bool rope_freq_factors = false;  // rope_freqs.weight present (llama 3.1 scaling)
  // Mixture of experts (0 experts: a dense FFN).
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;              // each expert's feed-forward width
  float expert_weights_scale = 1.0f;
  std::vector<TensorKind> layer_tensors;  // what every layer holds, in bind and wire order
  std::vector<LayerSettings> layers;      // n_layer entries

  int q_width() const { return n_head * head_dim; }
  int kv_width() const { return n_head_kv * head_dim; }
  bool has(TensorKind kind) const { return std::find(layer_tensors.begin(), layer_tensors.end(), kind) != layer_tensors.end(); }
  // The widest activation row a matmul reads or writes (sizes the scratch).
  int max_activation_width() const { return std::max({n_embd, n_ff, q_width(), n_ff_exp, n_expert}); }
  // The size of a tensor dimension for this model.
  int64_t dim(Dim d) const;

  // Reads and checks the hyperparameters; refuses an unsupported
  // architecture by name.
  static ModelConfig from_gguf(const gguf::File& file);
  // Checks a config that did not come from from_gguf (the wire); throws
  // shoal::Error naming what is impossible.
  void validate() const;
};

}  // namespace shoal
