#pragma once
// Hyperparameters of a model, read from GGUF metadata. Architectures differ
// only in the data here (rope style, biases, tied output), never in copied
// layer code.
#include <algorithm>
#include <string>

namespace shoal {
namespace gguf { class File; }

enum class RopeStyle {
  Interleaved,  // rotate adjacent pairs (x[2i], x[2i+1]): llama
  Neox,         // rotate halves (x[i], x[i + d/2]): qwen2
};

struct ModelConfig {
  std::string arch;     // general.architecture
  std::string name;     // general.name, for display
  int n_layer = 0;
  int n_embd = 0;       // width of the residual stream
  int n_head = 0;
  int n_head_kv = 0;    // < n_head: grouped-query attention
  int head_dim = 0;     // n_embd / n_head unless the file says otherwise
  int n_ff = 0;         // feed-forward width
  int n_vocab = 0;
  int n_ctx_train = 0;
  int rope_dim = 0;     // leading dims of each head that rotate
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // linear position scaling: pos * scale
  RopeStyle rope_style = RopeStyle::Interleaved;
  float norm_eps = 1e-5f;
  bool qkv_bias = false;     // q/k/v projections carry biases (qwen2)
  bool tied_output = false;  // no output.weight: the head reuses token_embd
  bool rope_freq_factors = false;  // rope_freqs.weight present (llama 3.1 scaling)

  int q_width() const { return n_head * head_dim; }
  int kv_width() const { return n_head_kv * head_dim; }
  // The widest activation row a matmul reads (sizes the activation scratch).
  int max_activation_width() const { return std::max({n_embd, n_ff, q_width()}); }

  // Reads and checks the hyperparameters; refuses an unsupported
  // architecture by name.
  static ModelConfig from_gguf(const gguf::File& file);
};

}  // namespace shoal
