#pragma once
// Which layers go where. The plan is a plain value: `shoal plan` prints it,
// the engine executes it, and it can be recomputed when a device is lost.
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cluster/device_info.h"

namespace shoal {

// How activations travel between the stages (cost_model.h says what each costs).
enum class Relay { shoal_star, shoal_chain, llama_rpc };

// layer: each device runs its own layers (a pipeline). tensor: the workers
// form one group that runs every layer, each a share of every matmul's
// rows (backend/tensor_split_backend.h); the primary keeps the head.
// automatic: whichever the cost model predicts faster (split_choice.h).
enum class SplitMode { layer, tensor, automatic };

// memory: layers in proportion to each device's usable memory (llama.cpp's
// default). speed: the split with the least predicted decode time that
// fits, every device the memory split gives a layer keeping at least one
// (the user named it: a slow one gets as few as pays, not none) unless
// keep_every_device is false; taken only when every device's speed is
// known (a GPU's is not measured yet) and it is predicted at least
// kSpeedSplitGain faster than the memory split, so that measurement noise
// between equal devices never moves layers.
enum class SplitPolicy { memory, speed };
inline constexpr double kSpeedSplitGain = 0.10;

struct PlanInput {
  std::vector<uint64_t> layer_bytes;  // weight bytes of each transformer layer
  std::vector<uint64_t> layer_read_bytes;  // bytes a decode step reads of each layer (MoE: routed experts); empty: layer_bytes
  std::vector<double> layer_flops;       // multiply-adds x 2 per token of each layer; empty: 2 per byte read
  std::vector<uint64_t> layer_kv_bytes;  // KV cache of each layer for n_ctx x n_seq (a windowed layer's is smaller)
  std::vector<bool> layer_recurrent;     // a Gated DeltaNet layer (DeviceInfo::recurrent_layer_ms); empty: none
  // A tensor group (-sm tensor) divides a layer's matrices among its members
  // (by rows; a mixture's experts by expert; not norms or biases): the bytes
  // of each layer's decode step that are divided, and the values per token
  // its all-gathers carry (the divided matrices' rows, the routed experts'
  // outputs). Empty: no tensor split predicted.
  std::vector<uint64_t> layer_split_bytes;
  std::vector<uint64_t> layer_exchange_values;
  // Attention's heads: a group divides them (and each member caches its KV
  // heads only) where it has a query head for each member; none: unknown,
  // every member holding the whole KV cache. layer_exchange_values then
  // counts attention's output for Q, K and V; with heads that a group does
  // not divide, their rows count instead: head_exchange_extra more values a
  // layer. A member holds (and reads) whole heads of Q, K and V: the bytes
  // of each layer's Q and of its K and V, for its part of them.
  AttentionHeads attention_heads;
  std::vector<uint64_t> layer_q_bytes, layer_kv_proj_bytes;
  uint64_t head_exchange_extra = 0;
  // A long prompt and a long context (cost_model.h's request predictions):
  // per layer, the multiply-adds x 2 of one query against one cached
  // position (q·k over its heads and the weighted sum of V; 0: a recurrent
  // layer), how many positions it attends to (0: all; else its window),
  // the bytes of one position's cache entry (read by each decode step that
  // attends to it; moved when a prompt's cache moves) and of one sequence's
  // recurrent state (moved whole). Empty: not counted.
  std::vector<double> layer_pair_flops;
  std::vector<int> layer_window;
  std::vector<uint64_t> layer_kv_row_bytes;
  std::vector<uint64_t> layer_state_bytes;
  uint64_t primary_bytes = 0;         // embedding + output head + buffers, on device 0
  uint64_t reserve_bytes = 0;         // kept free on every device
  uint64_t activation_bytes = 0;      // bytes of one token's hidden state on the wire
  uint64_t head_bytes = 0;            // bytes the output head streams per token (0: use primary_bytes)
  double head_flops = 0;              // multiply-adds x 2 of the head per token (0: 2 per byte streamed)
  uint64_t logit_bytes = 0;           // one row's logits, f32: what a tensor group running the head sends back
  std::vector<DeviceInfo> devices;    // devices[0] is the primary's own CPU
  std::vector<double> tensor_split;   // llama.cpp --tensor-split proportions, or empty
  SplitPolicy split = SplitPolicy::memory;
  bool keep_every_device = true;      // speed split: a device that can hold a layer keeps one
  // Layers [kept_together_from, n_layer) stay on one device: the last ones
  // read an earlier one's KV cache (gemma4 E2B/E4B); -1: any split.
  int kept_together_from = -1;
  Relay relay = Relay::shoal_star;    // how the plan's run will relay (its prediction)
};

struct StageAssignment {
  int device = 0;          // index into PlanInput::devices
  int layer_begin = 0;
  int layer_end = 0;       // exclusive; == layer_begin: the device holds no layers
  uint64_t weight_bytes = 0;
  uint64_t kv_bytes = 0;
  uint64_t free_after = 0; // the device's free memory left after loading
  double predicted_ms = 0; // this stage's share of a decode step: its weights + its network hops
};

struct Plan {
  std::vector<StageAssignment> stages;  // one per device, in device order
  SplitPolicy split = SplitPolicy::memory;  // how the layers were placed (speed: the speed split won)
  double memory_split_token_ms = 0.0;   // the memory split's prediction, for comparison (0: not computed)
  double predicted_token_ms = 0.0;      // decode time per token
  double predicted_head_ms = 0.0;       // of which the primary's output head
  double predicted_tok_s = 0.0;
};

// Layers contiguous in device order, never over any device's limit
// (free - reserve - (device 0: primary_bytes)): as tensor_split says, or
// by input.split (see SplitPolicy). Throws shoal::Error saying how much
// memory is missing where when it cannot fit. The prediction is
// cost_model.h's for input.relay.
Plan make_plan(const PlanInput& input);

// The table `shoal plan` and `shoal serve` print: one line per device with
// address, backend, layers, weight MiB, KV MiB, free MiB left, predicted
// ms of a decode step; then the prediction.
std::string format_plan(const Plan& plan, const PlanInput& input);

}  // namespace shoal
