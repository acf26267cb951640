#include "cluster/primary/cost_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "backend/tensor_split_shares.h"

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

// How many (query, cached position) pairs rows [start, start + b) of a
// prompt attend to, through a window of `window` positions (0: all).
double attended_pairs(int64_t start, int64_t b, int window) {
  const int64_t first = start + 1, last = start + b;  // each row attends to its own position and those before
  if (window <= 0 || last <= window) return (first + last) * static_cast<double>(b) / 2;
  const int64_t full_from = std::max<int64_t>(first, window);  // rows from here see a whole window
  const int64_t growing = std::max<int64_t>(0, full_from - first);
  return (first + first + growing - 1) * static_cast<double>(growing) / 2 +
         static_cast<double>(last - full_from + 1) * window;
}

// Attention's multiply-adds x 2 in layers [begin, end) for prompt rows [start, start + b).
double attention_flops(const PlanInput& in, int begin, int end, int64_t start, int64_t b) {
  double f = 0;
  for (int l = begin; l < end && l < static_cast<int>(in.layer_pair_flops.size()); ++l)
    f += in.layer_pair_flops[l] * attended_pairs(start, b, in.layer_window[l]);
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

int recurrent_layers(const PlanInput& in, int begin, int end) {
  int n = 0;
  for (int l = begin; l < end && l < static_cast<int>(in.layer_recurrent.size()); ++l) n += in.layer_recurrent[l];
  return n;
}

double stage_decode_ms(const PlanInput& in, int device, uint64_t read_bytes, int n_layers, int n_recurrent,
                       Relay relay) {
  if (n_layers <= 0) return 0.0;
  const DeviceInfo& dev = in.devices[device];
  double ms = read_bytes / (known(dev.matvec_gbps, kUnknownMatvecGbps) * 1e9) * 1e3 + dev.step_overhead_ms +
              n_recurrent * dev.recurrent_layer_ms;
  if (device != 0) ms += hop_ms(in, dev, n_layers, 1, relay);
  return ms;
}

Prediction predict(const Plan& plan, const PlanInput& in, Relay relay, int prefill_tokens, int micro_batch,
                   int n_batch) {
  Prediction p;
  p.prefill_tokens = prefill_tokens;
  const DeviceInfo& primary = in.devices.at(0);
  // Per stage with layers, for the prompt: ms per token of compute, the
  // fixed cost of a step, and the worker it hops to (null: the primary's own).
  struct PrefillStage {
    double ms_per_token, fixed;
    const DeviceInfo* remote;
    int begin, end;
    double gflops;
    double hop(const PlanInput& in, int b, Relay relay) const {
      return remote ? hop_ms(in, *remote, end - begin, b, relay) : 0.0;
    }
    // Rows [start, start + b): their weights' work, attention over what they see, and the step's fixed cost.
    double compute(const PlanInput& in, int64_t start, int b) const {
      return ms_per_token * b + attention_flops(in, begin, end, start, b) / (gflops * 1e9) * 1e3 + fixed;
    }
  };
  std::vector<PrefillStage> stages;
  int last_remote = -1;
  for (const StageAssignment& s : plan.stages) {
    const int n_layers = s.layer_end - s.layer_begin;
    const double ms = stage_decode_ms(in, s.device, decode_read_bytes(in, s.layer_begin, s.layer_end), n_layers,
                                      recurrent_layers(in, s.layer_begin, s.layer_end), relay);
    p.stage_ms.push_back(ms);
    p.token_ms += ms;
    if (n_layers == 0) continue;
    const DeviceInfo& dev = in.devices[s.device];
    const double gflops = known(dev.matmul_gflops, kUnknownMatmulGflops);
    const double per_token = layer_flops(in, s.layer_begin, s.layer_end) / (gflops * 1e9) * 1e3;
    if (s.device != 0) last_remote = s.device;
    stages.push_back(
        {per_token, dev.step_overhead_ms, s.device != 0 ? &dev : nullptr, s.layer_begin, s.layer_end, gflops});
  }
  // The last worker of a chain sends the hidden state home: one more one-way hop.
  auto home = [&](int b) {
    return relay == Relay::shoal_chain && last_remote >= 0 ? hop_ms(in, in.devices[last_remote], 0, b, relay) : 0.0;
  };
  p.token_ms += home(1);

  // A batch of b tokens stage after stage, and as Pipeline::run_pipelined
  // runs it: k micro-batches through S stages in k + S - 1 ticks, each as
  // long as its slowest stage.
  auto whole = [&](int64_t start, int b) {
    double t = home(b);
    for (const PrefillStage& s : stages) t += s.compute(in, start, b) + s.hop(in, b, relay);
    return t;
  };
  const bool can_pipeline = micro_batch > 0 && relay == Relay::shoal_star && stages.size() >= 2 && last_remote >= 0;
  // (Each micro-batch's attention taken at the batch's middle.)
  auto pipelined = [&](int64_t start, int b) {
    if (!can_pipeline || b < 2 * micro_batch) return whole(start, b);
    const int k = (b + micro_batch - 1) / micro_batch;
    double fill = 0, slowest = 0;
    for (const PrefillStage& s : stages) {
      const double t = s.compute(in, start + b / 2, micro_batch) + s.hop(in, micro_batch, relay);
      fill += t;
      slowest = std::max(slowest, t);
    }
    return fill + (k - 1) * slowest;
  };
  // The head streams its matrix once a step; a prompt needs logits for its
  // last token only (as llama-bench measures it).
  const uint64_t head = in.head_bytes ? in.head_bytes : in.primary_bytes;
  p.head_ms = head / (known(primary.matvec_gbps, kUnknownMatvecGbps) * 1e9) * 1e3;
  p.token_ms += p.head_ms;
  p.tok_s = p.token_ms > 0 ? 1e3 / p.token_ms : 0.0;
  // The prompt in batches of n_batch (the engine's -b), each one whole or pipelined.
  const int batch = n_batch > 0 ? n_batch : prefill_tokens;
  bool any_pipelined = false;
  for (int done = 0; done < prefill_tokens; done += batch) {
    const int b = std::min(batch, prefill_tokens - done);
    p.prefill_ms += whole(done, b);
    p.pipelined_prefill_ms += pipelined(done, b);
    any_pipelined = any_pipelined || (can_pipeline && b >= 2 * micro_batch);
  }
  p.prefill_ms += p.head_ms;
  p.prefill_tok_s = p.prefill_ms > 0 ? prefill_tokens * 1e3 / p.prefill_ms : 0.0;
  if (any_pipelined) {
    p.pipelined_prefill_ms += p.head_ms;
    p.pipelined_prefill_tok_s = prefill_tokens * 1e3 / p.pipelined_prefill_ms;
  } else {
    p.pipelined_prefill_ms = 0.0;
  }
  return p;
}

namespace {
// Which device of `plan` holds layer l (-1: none).
int holder(const Plan& plan, int l) {
  for (const StageAssignment& s : plan.stages)
    if (l >= s.layer_begin && l < s.layer_end) return s.device;
  return -1;
}
// Bytes a second between two devices: the link of whichever is not the
// primary, the slower of both where neither is.
double path_bytes_per_s(const PlanInput& in, int a, int b) {
  double gbps = 1e30;
  for (int d : {a, b})
    if (d != 0) gbps = std::min(gbps, known(in.devices.at(d).link_gbps, kUnknownLinkGbps));
  return gbps * 1e9;
}
// Layer l's cache entries for a context of n positions.
double layer_cache_bytes(const PlanInput& in, int l, int64_t n) {
  if (l >= static_cast<int>(in.layer_kv_row_bytes.size())) return 0.0;
  const int w = in.layer_window[l];
  return static_cast<double>(in.layer_kv_row_bytes[l]) * (w > 0 ? std::min<int64_t>(n, w) : n);
}
}  // namespace

RequestPrediction predict_request(const Plan& prompt_plan, const Plan& decode_plan, const PlanInput& in, Relay relay,
                                  const RequestShape& request, int n_batch, int micro_batch) {
  RequestPrediction r;
  const Prediction prompt = predict(prompt_plan, in, relay, request.prompt_tokens, micro_batch, n_batch);
  r.prefill_ms = prompt.pipelined_prefill_ms > 0 ? std::min(prompt.prefill_ms, prompt.pipelined_prefill_ms)
                                                 : prompt.prefill_ms;
  // Decode: the plan's step, and each stage reading its layers' cache of the average context.
  const int64_t context = request.prompt_tokens + request.generated / 2;
  r.token_ms = predict(decode_plan, in, relay).token_ms;
  for (const StageAssignment& s : decode_plan.stages) {
    double bytes = 0;
    for (int l = s.layer_begin; l < s.layer_end; ++l) bytes += layer_cache_bytes(in, l, context);
    r.token_ms += bytes / (known(in.devices.at(s.device).matvec_gbps, kUnknownMatvecGbps) * 1e9) * 1e3;
  }
  // The prompt's cache from where it was computed to where it is read.
  const int n_layer = static_cast<int>(in.layer_bytes.size());
  int moved_layers = 0;
  for (int l = 0; l < n_layer; ++l) {
    const int from = holder(prompt_plan, l), to = holder(decode_plan, l);
    if (from < 0 || to < 0 || from == to) continue;
    const double bytes = layer_cache_bytes(in, l, request.prompt_tokens) +
                         (l < static_cast<int>(in.layer_state_bytes.size()) ? in.layer_state_bytes[l] : 0);
    r.cache_bytes += bytes;
    r.cache_ms += bytes / path_bytes_per_s(in, from, to) * 1e3;
    ++moved_layers;
  }
  // Layer by layer as each finishes: the move runs behind the prompt and
  // ends at most one layer's part after it, or later where the link is the
  // slower of the two.
  if (moved_layers > 0) r.exposed_ms = std::max(0.0, r.cache_ms - r.prefill_ms) + r.cache_ms / moved_layers;
  r.total_ms = r.prefill_ms + r.exposed_ms + std::max(0, request.generated - 1) * r.token_ms;
  return r;
}

std::vector<std::vector<int>> tensor_group_weights(const PlanInput& in, const std::vector<std::vector<int>>& groups) {
  // Measured speeds in twentieths (finer would follow noise); --tensor-split as given, in thousandths.
  const int steps = in.tensor_split.empty() ? 20 : 1000;
  constexpr double kEvenWithin = 1.5;
  std::vector<std::vector<int>> weights;
  for (const std::vector<int>& group : groups) {
    std::vector<double> v;
    for (int d : group)
      v.push_back(!in.tensor_split.empty() ? in.tensor_split.at(static_cast<size_t>(d))
                                           : known(in.devices.at(d).matvec_gbps, kUnknownMatvecGbps));
    const double most = v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
    const double least = v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
    std::vector<int>& w = weights.emplace_back();
    for (double x : v) {
      const bool even = most <= 0 || (in.tensor_split.empty() && most < least * kEvenWithin);
      w.push_back(even ? 1 : std::max(1, static_cast<int>(std::lround(steps * x / most))));
    }
  }
  return weights;
}

namespace {
// Member `rank`'s fraction of what its group divides.
double member_fraction(const std::vector<int>& weights, size_t rank) {
  double total = 0;
  for (int w : weights) total += w;
  return total > 0 ? weights.at(rank) / total : 1.0;
}

// What a group's all-gathers cost per call: the slowest member's round
// trip and link, and the largest part any member takes in (the others'
// shares).
struct GroupLinks {
  double rtt_ms = 0, bytes_per_s = 1e30, taken_in = 0;
};
GroupLinks group_links(const PlanInput& in, const std::vector<int>& members, const std::vector<int>& weights) {
  GroupLinks g;
  for (size_t rank = 0; rank < members.size(); ++rank) {
    const DeviceInfo& dev = in.devices.at(members[rank]);
    g.rtt_ms = std::max(g.rtt_ms, dev.rtt_ms);
    g.bytes_per_s = std::min(g.bytes_per_s, known(dev.link_gbps, kUnknownLinkGbps) * 1e9);
    g.taken_in = std::max(g.taken_in, 1.0 - member_fraction(weights, rank));
  }
  return g;
}

// Where a group divides attention's heads, a member's part of Q and of K and
// V is whole heads (coarser than rows: SmolLM2's 9/3 heads on two members
// give 3/9 and 6/9), and with fewer KV heads than members a KV head two
// members read is held by both. The bytes of layers [begin, end) member
// `rank` holds (and reads a step) beyond what its share fraction f gives.
double head_bytes_beyond_share(const PlanInput& in, int begin, int end, const std::vector<int>& weights,
                               size_t rank, double f) {
  const AttentionHeads& h = in.attention_heads;
  if (!head_split(h, static_cast<int>(weights.size()))) return 0.0;
  const HeadShare s = head_share(h, static_cast<int>(rank), weights);
  const double q = static_cast<double>(s.q_heads()) / h.n_head, kv = static_cast<double>(s.kv_heads()) / h.n_head_kv;
  double extra = 0;
  for (int l = begin; l < end; ++l) {
    if (l < static_cast<int>(in.layer_q_bytes.size())) extra += in.layer_q_bytes[l] * (q - f);
    if (l < static_cast<int>(in.layer_kv_proj_bytes.size())) extra += in.layer_kv_proj_bytes[l] * (kv - f);
  }
  return extra;
}
}  // namespace

std::string tensor_group_misfit(const PlanInput& in, const std::vector<std::vector<int>>& groups) {
  const int n_layer = static_cast<int>(in.layer_bytes.size());
  const std::vector<std::vector<int>> weights = tensor_group_weights(in, groups);
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto [begin, end] = tensor_group_layers(n_layer, static_cast<int>(groups.size()), static_cast<int>(g));
    for (size_t rank = 0; rank < groups[g].size(); ++rank) {
      const double f = groups[g].size() > 1 ? member_fraction(weights[g], rank) : 1.0;
      // Its KV heads' part of an attention layer's cache, where the group divides the heads.
      const AttentionHeads& heads = in.attention_heads;
      const int size = static_cast<int>(groups[g].size());
      const double kv = head_split(heads, size) ? static_cast<double>(head_share(heads, static_cast<int>(rank),
                                                                                 weights[g]).kv_heads()) /
                                                      heads.n_head_kv
                                                : 1.0;
      double need = 0;
      for (int l = begin; l < end; ++l) {
        // What it holds of the layer: its share of what the group divides (in
        // the proportion of a step's reads), the rest whole, its part of the KV cache.
        const double read = static_cast<double>(decode_read_bytes(in, l, l + 1));
        const double divided = read > 0 && l < static_cast<int>(in.layer_split_bytes.size())
                                   ? std::min(1.0, in.layer_split_bytes[l] / read)
                                   : 0.0;
        need += in.layer_bytes[l] * (1.0 - divided * (1.0 - f));
        const bool recurrent = l < static_cast<int>(in.layer_recurrent.size()) && in.layer_recurrent[l];
        if (l < static_cast<int>(in.layer_kv_bytes.size()))
          need += static_cast<double>(in.layer_kv_bytes[l]) * (recurrent ? 1.0 : kv);
      }
      if (groups[g].size() > 1) need += head_bytes_beyond_share(in, begin, end, weights[g], rank, f);
      // The last group of two or more holds its share of the output head too.
      if (g + 1 == groups.size() && groups[g].size() > 1 && in.logit_bytes > 0)
        need += static_cast<double>(in.head_bytes) * f;
      const int d = groups[g][rank];
      const DeviceInfo& dev = in.devices.at(d);
      const double usable = static_cast<double>(dev.free_memory) - static_cast<double>(in.reserve_bytes) -
                            (d == 0 ? static_cast<double>(in.primary_bytes) : 0.0);
      if (need > usable)
        return fmt::format("{} would hold {:.0f} MiB of layers {}-{} and has {:.0f} MiB to lend", dev.address,
                           need / 1048576.0, begin, end - 1, std::max(0.0, usable) / 1048576.0);
    }
  }
  return "";
}

LayerRange tensor_group_layers(int n_layer, int n_groups, int group) {
  return {n_layer * group / n_groups, n_layer * (group + 1) / n_groups};
}

TensorGroupPrediction predict_tensor_groups(const PlanInput& in, const std::vector<std::vector<int>>& groups,
                                            int prefill_tokens, int n_batch, int exchanges_per_layer) {
  TensorGroupPrediction p;
  const int n_layer = static_cast<int>(in.layer_bytes.size());
  if (groups.empty() || in.layer_split_bytes.empty()) return p;
  const int batch = n_batch > 0 ? n_batch : prefill_tokens;
  const std::vector<std::vector<int>> weights = tensor_group_weights(in, groups);
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::vector<int>& members = groups[g];
    const auto [begin, end] = tensor_group_layers(n_layer, static_cast<int>(groups.size()), static_cast<int>(g));
    const bool grouped = members.size() > 1;
    const uint64_t read = decode_read_bytes(in, begin, end), divided = sum(in.layer_split_bytes, begin, end);
    const double flops = layer_flops(in, begin, end);
    // Q, K and V's rows are all-gathered where the group does not divide the heads.
    const bool by_heads = head_split(in.attention_heads, static_cast<int>(members.size()));
    const double values = static_cast<double>(sum(in.layer_exchange_values, begin, end)) +
                          (by_heads ? 0.0 : static_cast<double>(in.head_exchange_extra) * (end - begin));
    double compute = 0, per_token = 0, fixed = 0;
    for (size_t rank = 0; rank < members.size(); ++rank) {
      const DeviceInfo& dev = in.devices.at(members[rank]);
      const double f = grouped ? member_fraction(weights[g], rank) : 1.0;
      // Bytes this member reads a step.
      const double each = std::max(
          0.0, read - divided * (1.0 - f) + (grouped ? head_bytes_beyond_share(in, begin, end, weights[g], rank, f) : 0));
      const double share = read > 0 ? each / read : 1.0;
      compute = std::max(compute, each / (known(dev.matvec_gbps, kUnknownMatvecGbps) * 1e9) * 1e3 +
                                      dev.step_overhead_ms + recurrent_layers(in, begin, end) * dev.recurrent_layer_ms);
      per_token = std::max(per_token, flops * share / (known(dev.matmul_gflops, kUnknownMatmulGflops) * 1e9) * 1e3);
      fixed = std::max(fixed, dev.step_overhead_ms);
    }
    const GroupLinks links = group_links(in, members, weights[g]);
    // What a member takes in a step of `tokens`: the others' shares of every exchange value, f32.
    auto exchanges = [&](int tokens) {
      return !grouped ? 0.0
                      : (end - begin) * exchanges_per_layer * links.rtt_ms / 2 +
                            values * 4.0 * tokens * links.taken_in / links.bytes_per_s * 1e3;
    };
    const DeviceInfo& first = in.devices.at(members.front());
    p.compute_ms += compute;
    p.exchange_ms += exchanges(1);
    p.hop_ms += hop_ms(in, first, end - begin, 1, Relay::shoal_star);
    for (int done = 0; done < prefill_tokens; done += batch) {
      const int b = std::min(batch, prefill_tokens - done);
      p.prefill_ms += per_token * b + fixed + exchanges(b) + hop_ms(in, first, end - begin, b, Relay::shoal_star);
    }
  }
  const DeviceInfo& primary = in.devices.at(0);
  const uint64_t head = in.head_bytes ? in.head_bytes : in.primary_bytes;
  p.head_ms = head / (known(primary.matvec_gbps, kUnknownMatvecGbps) * 1e9) * 1e3;
  if (const std::vector<int>& last = groups.back(); last.size() > 1 && in.logit_bytes > 0) {
    // The last group runs it: each member its share of the rows, an all-gather of the logits, and
    // the logits (not a row) back to the primary.
    double read = 0;
    for (size_t rank = 0; rank < last.size(); ++rank)
      read = std::max(read, head * member_fraction(weights.back(), rank) /
                                (known(in.devices.at(last[rank]).matvec_gbps, kUnknownMatvecGbps) * 1e9) * 1e3);
    const GroupLinks links = group_links(in, last, weights.back());
    p.head_ms = read + links.rtt_ms / 2 + in.logit_bytes * (1.0 + links.taken_in) / links.bytes_per_s * 1e3;
    p.head_on_group = true;
  }
  p.token_ms = p.compute_ms + p.exchange_ms + p.hop_ms + p.head_ms;
  p.tok_s = 1e3 / p.token_ms;
  p.prefill_ms += p.head_ms;
  p.prefill_tok_s = prefill_tokens * 1e3 / p.prefill_ms;
  return p;
}

namespace {

// One decode step of `rows` rows of one sequence (a guess being checked):
// per stage the longer of reading its weights and computing the rows.
double rows_step_ms(const Plan& plan, const PlanInput& in, Relay relay, int rows) {
  double ms = 0;
  int last_remote = -1;
  for (const StageAssignment& s : plan.stages) {
    const int n_layers = s.layer_end - s.layer_begin;
    if (n_layers == 0) continue;
    const DeviceInfo& dev = in.devices[s.device];
    const double read = decode_read_bytes(in, s.layer_begin, s.layer_end) /
                        (known(dev.matvec_gbps, kUnknownMatvecGbps) * 1e9) * 1e3;
    const double compute = layer_flops(in, s.layer_begin, s.layer_end) * rows /
                           (known(dev.matmul_gflops, kUnknownMatmulGflops) * 1e9) * 1e3;
    ms += std::max(read, compute) + dev.step_overhead_ms +
          recurrent_layers(in, s.layer_begin, s.layer_end) * dev.recurrent_layer_ms;
    if (s.device != 0) {
      ms += hop_ms(in, dev, n_layers, rows, relay);
      last_remote = s.device;
    }
  }
  if (relay == Relay::shoal_chain && last_remote >= 0) ms += hop_ms(in, in.devices[last_remote], 0, rows, relay);
  const DeviceInfo& primary = in.devices.at(0);
  const uint64_t head = in.head_bytes ? in.head_bytes : in.primary_bytes;
  const double head_flops = in.head_flops > 0 ? in.head_flops : 2.0 * head;
  ms += std::max(head / (known(primary.matvec_gbps, kUnknownMatvecGbps) * 1e9) * 1e3,
                 head_flops * rows / (known(primary.matmul_gflops, kUnknownMatmulGflops) * 1e9) * 1e3);
  return ms;
}

}  // namespace

SpeculativePrediction predict_speculative(const Plan& plan, const PlanInput& in, Relay relay,
                                          const Speculation& spec) {
  SpeculativePrediction best;
  best.plain_token_ms = best.step_ms = best.token_ms = rows_step_ms(plan, in, relay, 1);
  const double a = std::clamp(spec.acceptance, 0.0, 0.999);
  for (int k = 1; k <= spec.draft_max; ++k) {
    const double tokens = (1.0 - std::pow(a, k + 1)) / (1.0 - a);
    const double step = rows_step_ms(plan, in, relay, k + 1) + k * spec.draft_token_ms;
    if (step / tokens < best.token_ms) best = {k, tokens, step, step / tokens, 0.0, best.plain_token_ms};
  }
  best.tok_s = best.token_ms > 0 ? 1e3 / best.token_ms : 0.0;
  return best;
}

}  // namespace shoal
