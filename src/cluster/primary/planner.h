#pragma once
// Which layers go where. The plan is a plain value: `shoal plan` prints it,
// the engine executes it, and it can be recomputed when a device is lost.
#include <cstdint>
#include <string>
#include <vector>

#include "cluster/device_info.h"

namespace shoal {

struct PlanInput {
  std::vector<uint64_t> layer_bytes;  // weight bytes of each transformer layer
  std::vector<uint64_t> layer_kv_bytes;  // KV cache of each layer for n_ctx x n_seq (a windowed layer's is smaller)
  uint64_t primary_bytes = 0;         // embedding + output head + buffers, on device 0
  uint64_t reserve_bytes = 0;         // kept free on every device
  uint64_t activation_bytes = 0;      // bytes of one token's hidden state on the wire
  uint64_t head_bytes = 0;            // bytes the output head streams per token (0: use primary_bytes)
  std::vector<DeviceInfo> devices;    // devices[0] is the primary's own CPU
  std::vector<double> tensor_split;   // llama.cpp --tensor-split proportions, or empty
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
  double predicted_token_ms = 0.0;      // decode time per token
  double predicted_head_ms = 0.0;       // of which the primary's output head
  double predicted_tok_s = 0.0;
};

// v1: layers in proportion to each device's usable memory
// (free - reserve - (device 0: primary_bytes)), contiguous in device order,
// never over any device's limit; or as tensor_split says. Throws
// shoal::Error saying how much memory is missing where when it cannot fit.
// Prediction: Σ stage bytes / device bandwidth + hops x RTT + activation
// bytes / link bandwidth (star: 2 hops per remote stage, i.e. one round
// trip and the activations sent there and back) + the output head on the
// primary. The KV reads of attention are not counted (they depend on how
// full the context is).
Plan make_plan(const PlanInput& input);

// The table `shoal plan` and `shoal serve` print: one line per device with
// address, backend, layers, weight MiB, KV MiB, free MiB left; then the
// prediction.
std::string format_plan(const Plan& plan, const PlanInput& input);

}  // namespace shoal
