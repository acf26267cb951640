#pragma once
// One transformer block, written once for every architecture. The variants
// come from the data: Q/K norms, biases and post-norms apply when the layer
// has those tensors, experts replace the FFN when it has a router, and the
// activation, rope and window come from ModelConfig.
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/recurrent_state.h"
#include "model/weights.h"

namespace shoal {

// Activation buffers for one batch in the backend's memory, sized once for
// the largest batch.
struct LayerScratch {
  LayerScratch(Backend& be, const ModelConfig& c, int max_tokens);
  // What the constructor allocates, for memory planning.
  static uint64_t bytes_for(const ModelConfig& c, int max_tokens);
  std::unique_ptr<Buffer> buffer;  // every row below, back to back
  DevicePtr x;                     // [max_tokens][n_embd]: the residual stream
  DevicePtr norm;                  // [max_tokens][n_embd]
  DevicePtr q;                      // [max_tokens][q_width]
  DevicePtr attn;                  // [max_tokens][max(q_width, DeltaNet value_width)]: before the output projection
  DevicePtr k, v;                  // [max_tokens][kv_width]
  // With an output gate (qwen35): the Q projection [max_tokens][2 q_width]
  // and the gate [max_tokens][q_width].
  DevicePtr q_and_gate, q_gate;
  // DeltaNet layers (qwen35): the joint projection [max_tokens][conv_width],
  // the output gate z [max_tokens][value_width], alpha and beta [max_tokens][n_v_heads],
  // both from one projection [max_tokens][2 n_v_heads] (qwen3next).
  DevicePtr mixed, z, alpha, beta, beta_alpha;
  // Latent attention (deepseek2): the heads' queries [max_tokens][q_proj_width],
  // the low-rank query [max_tokens][q_lora_rank], one head's slice in and out.
  DevicePtr q_heads, q_low, head_in, head_out;
  DevicePtr gate, up;              // [max_tokens][max(n_ff, n_ff_exp)]
  DevicePtr proj;                  // [max_tokens][n_embd]
  DevicePtr gate_up;               // [max_tokens][2 n_ff_exp]: an expert's stacked gate and up rows (gemma4)
  DevicePtr branch;                // [max_tokens][n_embd]: the dense FFN beside the experts (gemma4)
  // Per-layer inputs (gemma4 E2B/E4B): one layer's gate and input
  // [max_tokens][n_embd_per_layer]; the rows as they travel
  // [max_tokens][activation_width], uploaded here from the host; and where
  // this step's travelling rows hold every layer's inputs (after each row's
  // n_embd values, rows activation_width apart), set by the stage.
  DevicePtr ple_gate, ple_input, wide, side;
  // Mixture of experts only. Unless the backend routes on the device (the
  // routed_* rows below), the routing runs on the host: the router's logits
  // come down, each expert's rows are gathered on the device.
  DevicePtr router;      // [max_tokens][n_expert]
  DevicePtr gathered;    // [max_tokens][n_embd]: the rows routed to one expert
  DevicePtr expert_out;  // [max_tokens][n_expert_used][n_embd]
  std::vector<float> router_host;       // the router's logits
  std::vector<float> expert_out_host;   // the experts' outputs, for the weighted sum
  std::vector<float> sum_host;          // [max_tokens][n_embd]: the weighted sums
  std::vector<float> shared_host;       // [max_tokens][n_embd]: the shared expert's output (qwen35moe)
  std::vector<float> shared_gate_host;  // [max_tokens]: its gate's logit
  std::vector<int> route_expert;        // [max_tokens][n_expert_used]: each token's experts, best first
  std::vector<float> route_weight;      // their weights
  std::vector<int> expert_order;        // [n_expert], for the top-k sort
  // The general router's (model/feed_forward.cpp): each expert's
  // probability and selection score, each group's score and order.
  std::vector<double> expert_probs, expert_scores, group_scores;
  std::vector<int> group_order;
  std::vector<int> expert_rows;         // [max_tokens]: t * k + j of the rows routed to one expert
  // Where the backend routes experts itself (Backend::routes_experts): each
  // route slot's expert (int32) and weight, and its gate and up rows.
  std::unique_ptr<Buffer> routed_buffer;
  DevicePtr slot_experts, slot_weights;  // [max_tokens][n_expert_used]
  DevicePtr routed_gate, routed_up;      // [max_tokens][n_expert_used][n_ff_exp]
  static uint64_t routed_bytes_for(const ModelConfig& c, int max_tokens);
};

// The sequence memory of a stage's layers: a KV cache for attention layers,
// a recurrent state for DeltaNet ones.
struct SequenceMemory {
  const KvCache& kv;
  const RecurrentState& state;
};

// s.x: the residual stream [n_tokens][n_embd], updated in place, inside a
// backend step begun with the batch's rows.
// layer: the model's layer index; index: this layer's index inside `memory`.
// rows_out, when not null, lists (ascending) the only rows read after this
// layer (the model's last layer, feeding the head: the rows that want
// logits). Every row's K and V are still stored; the listed rows are
// finished and left in place in s.x, the others hold nothing meaningful.
void forward_layer(Backend& be, const ModelConfig& c, int layer, const LayerWeights& w, const Matrix& rope_freqs,
                   const SequenceMemory& memory, int index, int n_tokens, LayerScratch& s,
                   const std::vector<int>* rows_out = nullptr);

// Takes sequence `seq`'s DeltaNet layers among [begin, end) back to its
// first n_pos positions, within the last step they kept
// (model/recurrent_state.h): their state before it, and the recurrence run
// again over the kept rows before n_pos, on the scratch. False (nothing
// changed) when that step was not kept or began after n_pos. Outside a step.
bool rewind_delta_nets(Backend& be, const ModelConfig& c, const std::vector<LayerWeights>& layers, int begin, int end,
                       RecurrentState& state, int seq, int n_pos, LayerScratch& s);

// The optional ops (Backend::runs) that layers [begin, end) need.
std::vector<OptionalOp> optional_ops_for(const ModelConfig& c, int begin, int end);

}  // namespace shoal
