#pragma once
// Hyperparameters of a model, read from GGUF metadata as llama.cpp reads
// them. Architectures differ only in the data here (model/architecture.h
// picks the layer's tensors and block variants), never in copied layer code.
#include <algorithm>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/architecture.h"

namespace shoal {
namespace gguf { class File; }

// How a layer mixes tokens: attention over a KV cache, or a Gated DeltaNet
// (qwen35) over a fixed-size recurrent state per sequence.
enum class LayerKind { Attention, DeltaNet };

// What may differ from layer to layer (Gemma 3: sliding-window local layers
// with their own rope base, a global layer every sixth; Qwen3.5: DeltaNet
// layers between the attention ones).
struct LayerSettings {
  int window = 0;  // attend to the last `window` positions (this one included); 0: all
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // linear position scaling: pos * scale
  LayerKind kind = LayerKind::Attention;
};

// A Gated DeltaNet layer's sizes, as llama.cpp reads them (ssm.*): each key
// head's q and k and each value head's v are head_dim wide; value heads
// share key heads in turn (value head h reads key head h % n_k_heads), or,
// with keys_interleaved (qwen3next), in runs (h / (n_v_heads / n_k_heads)).
struct DeltaNetShape {
  int conv_kernel = 0;  // taps of the causal convolution over q, k and v
  int head_dim = 0;     // ssm.state_size
  int n_k_heads = 0;    // ssm.group_count
  int n_v_heads = 0;    // ssm.time_step_rank
  bool keys_interleaved = false;
  int key_width() const { return head_dim * n_k_heads; }
  int value_width() const { return head_dim * n_v_heads; }
  int conv_width() const { return 2 * key_width() + value_width(); }  // q, k, v side by side
  // Per sequence: the convolution's last conv_kernel - 1 inputs and each
  // value head's head_dim x head_dim state.
  int64_t conv_state_floats() const { return static_cast<int64_t>(conv_kernel - 1) * conv_width(); }
  int64_t ssm_state_floats() const { return static_cast<int64_t>(n_v_heads) * head_dim * head_dim; }
};

// Multi-head latent attention (deepseek2), as llama.cpp runs it: each
// token caches one row of kv_lora_rank latent values and rope_dim roped key
// values, shared by every head (one KV head of head_dim = kv_lora_rank +
// rope_dim); a head's query is its nope part (qk_nope values) pushed
// through the head's absorbed key matrix into the latent, then its roped
// part; the head's output, a mix of latents, goes through its value matrix
// to v_head_dim values. Absent (kv_lora_rank 0) for the others.
struct LatentAttentionShape {
  int q_lora_rank = 0;   // 0: the query is one projection (attn_q), not a low-rank pair
  int kv_lora_rank = 0;
  int qk_nope = 0;       // each head's query values that do not rotate
  int v_head_dim = 0;
  bool operator==(const LatentAttentionShape&) const = default;
};

// How one layer attends: its KV heads, head size and rotated dims. Every
// layer of a model shares one, except where windowed layers have their own
// (Gemma 4: heads of 256 over more KV heads on the windowed layers, of 512
// on the global ones; llama.cpp's *_swa keys).
struct AttentionGeometry {
  int n_head_kv = 0;
  int head_dim = 0;
  int rope_dim = 0;
  bool operator==(const AttentionGeometry&) const = default;
};

// How the router's logits become expert weights (llama.cpp's
// expert_gating_func): a softmax over all experts, or each one's sigmoid.
enum class ExpertGating { Softmax, Sigmoid };

struct ModelConfig {
  std::string arch;     // general.architecture
  std::string name;     // general.name, for display
  int n_layer = 0;
  int n_nextn = 0;      // multi-token-prediction blocks after the layers (nextn_predict_layers: the MTP draft)
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
  RopeYarn yarn;                   // YaRN and the rope's magnitude scale (backend/backend.h)
  // Mixture of experts (0 experts: a dense FFN).
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;              // each expert's feed-forward width
  int n_ff_shexp = 0;            // the shared expert's width (qwen35moe); 0: none
  float expert_weights_scale = 1.0f;
  ExpertGating expert_gating = ExpertGating::Softmax;
  bool expert_weights_norm = true;  // the chosen experts' weights are divided by their sum
  int n_expert_groups = 0;       // > 1: experts in groups, top-k drawn from the best n_group_used groups
  int n_group_used = 0;
  int n_dense_lead = 0;          // leading layers with a dense FFN before the expert ones (deepseek2)
  LatentAttentionShape mla;      // latent attention's sizes (deepseek2)
  bool q_gate = false;           // attn_q holds, head by head, the query and a gate on the output (qwen35)
  bool qk_norm_whole = false;    // the Q/K norms span the whole projection, all heads at once (minimax-m2)
  DeltaNetShape delta;           // the DeltaNet layers' sizes (hybrid models)
  // The windowed layers' own geometry (head_dim 0: the model's); such
  // layers rotate without rope_freqs, which is the global layers' (gemma4).
  AttentionGeometry window_geometry;
  bool v_norm = false;           // V is RMS-normalised per head, without a weight (gemma4)
  // Gemma 4 E2B/E4B: each layer's own input from the token (n_embd_per_layer
  // values, computed with the embedding and carried beside the residual
  // stream: activation_width), and the last n_kv_shared layers attending
  // over an earlier layer's cache (kv_source) with an FFN of n_ff_shared
  // (0: n_ff; the "double-wide" MLP).
  int n_embd_per_layer = 0;
  int n_kv_shared = 0;
  int n_ff_shared = 0;
  float router_input_scale = 0.0f;  // > 0: the router reads the layer's input RMS-normalised, times ffn_gate_inp.scale and this (gemma4)
  std::string ffn_norm_name = "ffn_norm.weight";  // the GGUF name of the FFN's norm
  std::vector<TensorKind> layer_tensors;      // what every attention layer holds, in bind and wire order
  std::vector<TensorKind> recurrent_tensors;  // what every DeltaNet layer holds; empty without them
  std::vector<TensorKind> lead_tensors;       // what each of the n_dense_lead layers holds
  // What a global (unwindowed) layer holds where it differs from the
  // windowed ones (gemma4: V from K's projection, no attn_v); empty: layer_tensors.
  std::vector<TensorKind> global_tensors;
  // What a layer that reads an earlier layer's cache holds: no K or V (gemma4 E2B/E4B).
  std::vector<TensorKind> reuse_tensors;
  std::vector<LayerSettings> layers;          // n_layer entries

  int q_width() const { return n_head * head_dim; }
  int kv_width() const { return n_head_kv * head_dim; }
  bool windowed(int layer) const { return layers[layer].window > 0; }
  // Every layer's per-layer inputs side by side, and a residual row with them
  // (what travels between stages; n_embd for every other model).
  int side_width() const { return n_embd_per_layer * n_layer; }
  int activation_width() const { return n_embd + side_width(); }
  // The layer whose KV cache layer `layer` reads (-1: its own): a shared
  // windowed layer the last windowed one before the sharing, a global one
  // the last global one (llama.cpp's n_layer_kv_from_start - 2 or - 1).
  int kv_source(int layer) const {
    const int first = n_layer - n_kv_shared;
    return n_kv_shared > 0 && layer >= first && layer < n_layer ? first - (windowed(layer) ? 2 : 1) : -1;
  }
  int ff_width(int layer = -1) const {
    return n_ff_shared > 0 && layer >= n_layer - n_kv_shared && layer < n_layer ? n_ff_shared : n_ff;
  }
  // Layer `layer`'s geometry: the windowed layers' own where they have one.
  AttentionGeometry attention_of(int layer) const {
    if (layer >= 0 && window_geometry.head_dim > 0 && windowed(layer)) return window_geometry;
    return {n_head_kv, head_dim, rope_dim};
  }
  bool uniform_attention() const { return window_geometry.head_dim == 0; }
  int q_width(int layer) const { return n_head * attention_of(layer).head_dim; }
  int kv_width(int layer) const { const AttentionGeometry g = attention_of(layer); return g.n_head_kv * g.head_dim; }
  // The widest of any layer (sizes scratch rows).
  int max_q_width() const { return std::max(q_width(), uniform_attention() ? 0 : n_head * window_geometry.head_dim); }
  int max_kv_width() const {
    return std::max(kv_width(), uniform_attention() ? 0 : window_geometry.n_head_kv * window_geometry.head_dim);
  }
  // Whether layer `layer` rotates by the file's rope_freqs (not the windowed
  // layers of a model whose windowed layers have their own geometry).
  bool layer_rope_freqs(int layer) const { return rope_freq_factors && (uniform_attention() || !windowed(layer)); }
  bool has(TensorKind kind) const { return std::find(layer_tensors.begin(), layer_tensors.end(), kind) != layer_tensors.end(); }
  bool recurrent(int layer) const { return layers[layer].kind == LayerKind::DeltaNet; }
  bool has_recurrent_layers() const { return !recurrent_tensors.empty(); }
  // What layer `layer` holds.
  const std::vector<TensorKind>& tensors_of(int layer) const {
    return recurrent(layer)                                ? recurrent_tensors
           : layer < n_dense_lead                          ? lead_tensors
           : kv_source(layer) >= 0                         ? reuse_tensors
           : !global_tensors.empty() && !windowed(layer) ? global_tensors
                                                           : layer_tensors;
  }
  bool latent_attention() const { return mla.kv_lora_rank > 0; }
  // Rows of the query projection: each head's query (and gate), or under
  // latent attention its nope and rope parts.
  int q_proj_width(int layer = -1) const {
    return latent_attention() ? n_head * (mla.qk_nope + rope_dim) : q_width(layer) * (q_gate ? 2 : 1);
  }
  // The output projection's input: the heads' outputs.
  int attn_out_width(int layer = -1) const { return latent_attention() ? n_head * mla.v_head_dim : q_width(layer); }
  // Values per cached V row: none under latent attention (V is the K row's latent part).
  int kv_v_width() const { return latent_attention() ? 0 : kv_width(); }
  // The GGUF name of a tensor of this model (blk.N.name for a layer's).
  std::string tensor_name(TensorKind kind, int layer = -1) const;
  // The widest activation row a matmul reads or writes (sizes the scratch).
  int max_activation_width() const {
    return std::max({n_embd, n_ff, n_ff_shared, max_q_width() * (q_gate ? 2 : 1), q_proj_width(), n_ff_exp,
                     n_ff_shexp, n_expert, delta.conv_width(), mla.q_lora_rank, max_kv_width(),
                     n_nextn > 0 ? 2 * n_embd : 0, side_width()});
  }
  // The size of a tensor dimension for this model; the attention dims are
  // layer `layer`'s (-1: the global layers').
  int64_t dim(Dim d, int layer = -1) const;

  // Reads and checks the hyperparameters; refuses an unsupported
  // architecture by name.
  static ModelConfig from_gguf(const gguf::File& file);
  // Checks a config that did not come from from_gguf (the wire); throws
  // shoal::Error naming what is impossible.
  void validate() const;
};

}  // namespace shoal
