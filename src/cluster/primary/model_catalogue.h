#pragma once
// Models by name and quantisation instead of a GGUF file ("qwen2.5-72b:
// q4_k_m"), for `shoal plan --cluster`: what a model would need and cost on
// a cluster before anything is downloaded. The data is data/models.toml,
// embedded at build time, with a source for every figure.
#include <optional>
#include <string>
#include <vector>

#include "cluster/primary/planner.h"
#include "model/kv_cache.h"

namespace shoal {

struct CatalogueModel {
  std::string name;    // "qwen2.5-72b"
  std::string label;   // "Qwen2.5 72B"
  std::string quant;   // "q4_k_m"
  double weights = 0;         // count
  double active_weights = 0;  // read per decode step (a mixture of experts reads its routed experts)
  double bits = 0;            // per weight
  int n_layer = 0, n_embd = 0, n_vocab = 0, kv_width = 0, context = 0;
  // Values per cached V row: kv_width, or 0 under latent attention (DeepSeek:
  // the cached row is the latent and the rope key, V is the latent).
  int v_width = 0;
  bool tied_output = false;
  // Hybrid models (Qwen3.5/3.6): every full_attention_interval-th layer
  // attends (and holds KV); the others are Gated DeltaNets holding, per
  // sequence, a recurrent state of this many f32 values whatever the context.
  int full_attention_interval = 1;
  int64_t delta_net_state_floats = 0;
  bool attends(int layer) const { return (layer + 1) % full_attention_interval == 0; }
  // Sliding-window layers (gpt-oss: even layers see the last 128 positions)
  // hold KV for the window only.
  int sliding_window = 0;
  int window_period = 0;  // layer i is windowed when i % period < period - 1
  int window_kv_width = 0;  // a windowed layer's K (and V) width where not kv_width (Gemma 4)
  bool windowed(int layer) const { return sliding_window > 0 && layer % window_period < window_period - 1; }
};

// "name:quant" -> the model; std::nullopt when `spec` has no ':' or names
// an existing file (a GGUF path). Throws shoal::Error for an unknown name
// or quantisation, listing the known ones.
std::optional<CatalogueModel> find_catalogue_model(const std::string& spec);

// The model side of a plan, as plan_input_for_model gives it for a file:
// every layer the same size, the cache for n_ctx (<= 0: min(context, 4096))
// x n_seq in kv_types, the embedding and head on the primary.
PlanInput plan_input_for_catalogue_model(const CatalogueModel& model, int n_ctx, int n_seq, int n_batch,
                                         KvTypes kv_types);

}  // namespace shoal
