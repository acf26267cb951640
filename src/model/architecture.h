#pragma once
// One entry of data per supported architecture: which tensors a layer has
// (and which of them are optional), and which variant of each block it runs.
// The layer code (model/transformer_layer.cpp) is written once; it applies a
// block variant when the layer has its tensors (Q/K norms, post-norms,
// biases, experts), so an architecture that differs only in those, or in its
// activation or rope style, is one entry here plus its test.
#include <span>
#include <string>
#include <string_view>

#include "model/tensor_names.h"

namespace shoal {

enum class RopeStyle {
  Interleaved,  // rotate adjacent pairs (x[2i], x[2i+1]): llama
  Neox,         // rotate halves (x[i], x[i + d/2]): qwen2, qwen3, gemma3, gemma4
};

enum class Activation {
  Silu,      // SwiGLU: silu(gate) * up
  GeluTanh,  // GeGLU: gelu(gate) * up, gelu in its tanh form
  SiluOai,   // gpt-oss: clamped, x * sigmoid(1.702 x) * (y + 1) (Backend::swiglu_oai)
};

struct LayerTensor {
  TensorKind kind;
  bool optional = false;  // bound when the file has it (in every layer or none)
};

struct Architecture {
  std::string_view name;       // general.architecture
  bool experts;                // the FFN is a mixture of experts (the file sets expert_count)
  RopeStyle rope_style;
  Activation activation;
  bool scale_embeddings;       // embeddings times sqrt(n_embd) (gemma)
  int sliding_window_period;   // with a sliding window: layer i is global when i % period == period - 1
  std::span<const LayerTensor> layer_tensors;  // in bind and wire order
  // Hybrid models (qwen35): the tensors of the Gated DeltaNet layers (which
  // layers those are comes from the file); empty for the others.
  std::span<const LayerTensor> recurrent_tensors = {};
  bool attention_output_gate = false;  // attn_q holds, head by head, the query and a sigmoid gate on the output
  // The GGUF name of the FFN's norm when not ffn_norm.weight (qwen35 stores
  // it as post_attention_norm).
  std::string_view ffn_norm_name = {};
  // A shared expert beside the routed ones, in every layer (qwen35moe).
  std::span<const LayerTensor> shared_expert_tensors = {};
  // Windowed layers rotate like the global ones (gpt-oss: the file's base and
  // scale, YaRN included) instead of by rope.freq_base_swa at scale 1 (gemma3).
  bool window_rope_like_global = false;
  // The leading layers' tensors, a dense FFN where the others have experts
  // (deepseek2: how many comes from the file).
  std::span<const LayerTensor> lead_tensors = {};
  // Multi-head latent attention replaces Q/K/V (deepseek2; model/config.h).
  bool latent_attention = false;
  // The router's gating function, weight normalisation and scale come from
  // the file (expert_gating_func, ...), as llama.cpp reads them for deepseek2.
  bool routing_from_file = false;
  // An expert's width when the file leaves expert_feed_forward_length out
  // (or 0): the dense width split among the experts a token uses,
  // feed_forward_length / expert_used_count (qwen3moe, qwen35moe, as
  // llama.cpp computes it), else feed_forward_length itself.
  bool expert_width_split = false;
  // With routing_from_file: the gating function where the file leaves
  // expert_gating_func out (llama.cpp's default for the architecture: 1
  // softmax, 2 sigmoid), and whether the chosen experts' weights are
  // normalised whatever expert_weights_norm says (minimax-m2).
  int default_expert_gating = 1;
  bool expert_weights_always_norm = false;
  // The Q/K norms span the whole projection, every head at once
  // (minimax-m2), instead of one head.
  bool qk_norm_whole = false;
  // DeltaNet value heads share key heads in runs, not in turn (qwen3next;
  // model/config.h, DeltaNetShape).
  bool delta_keys_interleaved = false;
  // Windowed layers with a geometry of their own (model/config.h,
  // AttentionGeometry) and, where the lists differ, tensors of their own
  // (gemma4: the global layers take V from K's projection).
  bool window_geometry = false;
  bool value_norm = false;       // V is RMS-normalised per head, without a weight (gemma4)
  float attention_scale = 0.0f;  // q·k's scale where not 1/sqrt(head size) (gemma4: 1, its Q/K norms scale)
};

// The entry for `name` (with or without experts); throws naming the
// architecture and the supported ones. `source` names the file in messages.
const Architecture& find_architecture(const std::string& name, bool experts, const std::string& source);
// "gemma3, llama, ..." for messages and docs.
std::string supported_architectures();

}  // namespace shoal
