#include "cluster/primary/cost_model.h"

#include <algorithm>
#include <numeric>

namespace shoal {
namespace {

// Assumed when a device or link did not report a measurement: a plan must
// still come out, and these are ordinary values for a desktop and a LAN.
constexpr double kUnknownMatvecGbps = 10.0;
constexpr double kUnknownMatmulGflops = 200.0;
constexpr double kUnknownLinkGbps = 1.0;

double known(double v, double unknown) { return v > 0 ? v : unknown; }

uint64_t sum(const std::vector<uint64_t>& v, int begin, int end) {
  uint64_t s = 0;
  for (int l = begin; l < end && l < static_cast<int>(v.size()); ++l) s += v[l];
  return s;
}

double layer_flops(const PlanInput& in, int begin, int end) {
  double f = 0;
  for (int l = begin; l < end; ++l)
    f += l < static_cast<int>(in.layer_flops.size()) ? in.layer_flops[l]
                                                      // Without a count: 2 per weight, one byte a weight (8-bit).
                                                      : 2.0 * (in.layer_read_bytes.empty() ? in.layer_bytes[l]
                                                                                            : in.layer_read_bytes[l]);
  return f;
}

// The network part of one stage's step carrying n_tokens hidden states.
double hop_ms(const PlanInput& in, const DeviceInfo& dev, int n_layers, int n_tokens, Relay relay) {
  const double link = known(dev.link_gbps, kUnknownLinkGbps) * 1e9;
  const double act = static_cast<double>(in.activation_bytes) * n_tokens;
  switch (relay) {
    case Relay::shoal_star:
      return dev.rtt_ms + 2.0 * act / link * 1e3;
    case Relay::shoal_chain:
      return dev.rtt_ms / 2 + act / link * 1e3;  // into this stage; the way back is added once
    case Relay::llama_rpc:
      return 2.0 * dev.rtt_ms + (2.0 * act + kLlamaRpcGraphBytesPerLayer * n_layers) / link * 1e3;
  }
  return 0.0;
}

}  // namespace

uint64_t decode_read_bytes(const PlanInput& in, int begin, int end) {
  return in.layer_read_bytes.empty() ? sum(in.layer_bytes, begin, end) : sum(in.layer_read_bytes, begin, end);
}

const char* relay_name(Relay relay) {
  switch (relay) {
    case Relay::shoal_star: return "shoal (star)";
    case Relay::shoal_chain: return "shoal (chain)";
    case Relay::llama_rpc: return "llama.cpp RPC";
  }
  return "?";
}

double stage_decode_ms(const PlanInput& in, int device, uint64_t read_bytes, int n_layers, Relay relay) {
  if (n_layers <= 0) return 0.0;
  const DeviceInfo& dev = in.devices[device];
  double ms = read_bytes / (known(dev.matvec_gbps, kUnknownMatvecGbps) * 1e9) * 1e3 + dev.step_overhead_ms;
  if (device != 0) ms += hop_ms(in, dev, n_layers, 1, relay);
  return ms;
}

Prediction predict(const Plan& plan, const PlanInput& in, Relay relay, int prefill_tokens, int micro_batch) {
  Prediction p;
  p.prefill_tokens = prefill_tokens;
  const DeviceInfo& primary = in.devices.at(0);
  int last_remote = -1;
  // Per stage with layers: its compute for the whole prompt and its hop for one micro-batch.
  std::vector<std::pair<double, double>> micro;
  const int u = micro_batch > 0 ? std::min(micro_batch, prefill_tokens) : prefill_tokens;
  for (const StageAssignment& s : plan.stages) {
    const double ms = stage_decode_ms(in, s.device, decode_read_bytes(in, s.layer_begin, s.layer_end),
                                      s.layer_end - s.layer_begin, relay);
    p.stage_ms.push_back(ms);
    p.token_ms += ms;
    if (s.layer_end == s.layer_begin) continue;
    const DeviceInfo& dev = in.devices[s.device];
    const double compute = layer_flops(in, s.layer_begin, s.layer_end) * prefill_tokens /
                           (known(dev.matmul_gflops, kUnknownMatmulGflops) * 1e9) * 1e3;
    p.prefill_ms += compute + dev.step_overhead_ms;
    double micro_hop = 0;
    if (s.device != 0) {
      p.prefill_ms += hop_ms(in, dev, s.layer_end - s.layer_begin, prefill_tokens, relay);
      micro_hop = hop_ms(in, dev, s.layer_end - s.layer_begin, u, relay);
      last_remote = s.device;
    }
    micro.emplace_back(compute, micro_hop + dev.step_overhead_ms);
  }
  if (relay == Relay::shoal_chain && last_remote >= 0) {
    // The last worker sends the hidden state home: one more one-way hop.
    p.token_ms += hop_ms(in, in.devices[last_remote], 0, 1, relay);
    p.prefill_ms += hop_ms(in, in.devices[last_remote], 0, prefill_tokens, relay);
  }
  // The head streams its matrix once a step; a prompt needs logits for its
  // last token only (as llama-bench measures it).
  const uint64_t head = in.head_bytes ? in.head_bytes : in.primary_bytes;
  p.head_ms = head / (known(primary.matvec_gbps, kUnknownMatvecGbps) * 1e9) * 1e3;
  p.token_ms += p.head_ms;
  p.prefill_ms += p.head_ms;
  p.tok_s = p.token_ms > 0 ? 1e3 / p.token_ms : 0.0;
  p.prefill_tok_s = p.prefill_ms > 0 ? prefill_tokens * 1e3 / p.prefill_ms : 0.0;
  // As Pipeline::run_pipelined: k micro-batches through S stages in k+S-1
  // ticks, each as long as its slowest stage (at least one stage a worker's).
  const int k = (prefill_tokens + u - 1) / u;
  if (micro_batch > 0 && relay == Relay::shoal_star && micro.size() >= 2 && last_remote >= 0 && k >= 2) {
    double fill = 0, slowest = 0;
    for (const auto& [compute, fixed] : micro) {
      const double t = compute * u / prefill_tokens + fixed;
      fill += t;
      slowest = std::max(slowest, t);
    }
    p.pipelined_prefill_ms = fill + (k - 1) * slowest + p.head_ms;
    p.pipelined_prefill_tok_s = prefill_tokens * 1e3 / p.pipelined_prefill_ms;
  }
  return p;
}

}  // namespace shoal
