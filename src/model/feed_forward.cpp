#include "model/feed_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/scalar_activations.h"
#include "model/transformer_layer.h"

namespace shoal {
namespace {

// Biases of one expert's gate, up and down rows (gpt-oss), each optional.
struct ExpertBiases {
  Matrix gate, up, down;
};

// gate and up apart, or (gate empty) up holding both, stacked (gemma4's
// ffn_gate_up_exps): one matmul, then its halves.
void gated(Backend& be, const ModelConfig& c, const Matrix& gate, const Matrix& up, const Matrix& down,
           DevicePtr in, DevicePtr out, int n, LayerScratch& s, const ExpertBiases& bias = {}) {
  const int64_t width = gate.empty() ? up.rows / 2 : gate.rows;
  if (gate.empty()) {
    be.matmul(up, in, s.gate_up, n);
    be.split_halves(s.gate_up, n, static_cast<int>(width), s.gate, s.up);
  } else {
    const Backend::MatmulOutput gate_up[] = {{&gate, s.gate}, {&up, s.up}};
    be.matmuls(gate_up, in, n);
  }
  if (!bias.gate.empty()) be.add_bias(s.gate, bias.gate, n, static_cast<int>(width));
  if (!bias.up.empty()) be.add_bias(s.up, bias.up, n, static_cast<int>(width));
  const int64_t count = static_cast<int64_t>(n) * width;
  switch (c.activation) {
    case Activation::GeluTanh: be.geglu(s.gate, s.up, s.gate, count); break;
    case Activation::SiluOai: be.swiglu_oai(s.gate, s.up, s.gate, count); break;
    case Activation::Silu: be.swiglu(s.gate, s.up, s.gate, count); break;
  }
  be.matmul(down, s.gate, out, n);
  if (!bias.down.empty()) be.add_bias(out, bias.down, n, static_cast<int>(down.rows));
}

// Row e of a [n_expert][width] f32 bias, or nothing.
Matrix expert_bias(const Matrix& m, int e) {
  if (m.empty()) return {};
  return Matrix{m.type, m.data + static_cast<size_t>(e) * m.row_stride(), 1, m.cols};
}

// Expert e of a [n_expert * rows][cols] tensor.
Matrix expert(const Matrix& m, int e, int64_t rows) { return stacked_slice(m, e, rows); }

// The top-k experts of one token, best first (ties to the lower id), and
// their weights: softmax over all experts, renormalised over the chosen
// ones — the same as a softmax over the chosen logits, computed that way.
void route(const float* logits, int n_expert, int k, float scale, int* order, int* experts, float* weights) {
  std::iota(order, order + n_expert, 0);
  std::partial_sort(order, order + k, order + n_expert, [&](int a, int b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  const float top = logits[order[0]];
  double sum = 0.0;
  for (int j = 0; j < k; ++j) sum += std::exp(static_cast<double>(logits[order[j]] - top));
  for (int j = 0; j < k; ++j) {
    experts[j] = order[j];
    weights[j] = static_cast<float>(std::exp(static_cast<double>(logits[order[j]] - top)) / sum * scale);
  }
}

// The general router (deepseek2), as llama.cpp's build_moe_ffn: each
// expert's probability (softmax over all, or its sigmoid); a selection
// score = probability + the file's bias; with groups, only the experts of
// the n_group_used groups with the best sums of their two best scores
// compete; the top k by score, weighted by their unbiased probabilities,
// normalised to sum 1 if the file says, times the scale. Ties go to the
// lower id, groups too.
void route_biased(const float* logits, const float* bias, const ModelConfig& c, LayerScratch& s, int* experts,
                  float* weights) {
  const int n = c.n_expert, k = c.n_expert_used;
  int* order = s.expert_order.data();
  std::vector<double>& probs = s.expert_probs;
  std::vector<double>& score = s.expert_scores;
  if (c.expert_gating == ExpertGating::Sigmoid) {
    for (int e = 0; e < n; ++e) probs[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e])));
  } else {
    const float top = *std::max_element(logits, logits + n);
    double sum = 0.0;
    for (int e = 0; e < n; ++e) sum += probs[e] = std::exp(static_cast<double>(logits[e] - top));
    for (int e = 0; e < n; ++e) probs[e] /= sum;
  }
  for (int e = 0; e < n; ++e) score[e] = probs[e] + (bias ? bias[e] : 0.0);
  if (c.n_expert_groups > 1) {
    const int groups = c.n_expert_groups, per = n / groups;
    std::vector<double>& group_score = s.group_scores;
    std::vector<int>& group_order = s.group_order;
    for (int g = 0; g < groups; ++g) {
      double best = -INFINITY, second = -INFINITY;
      for (int e = g * per; e < (g + 1) * per; ++e) {
        if (score[e] > best) second = best, best = score[e];
        else if (score[e] > second) second = score[e];
      }
      group_score[g] = best + second;
    }
    std::iota(group_order.begin(), group_order.end(), 0);
    std::sort(group_order.begin(), group_order.end(), [&](int a, int b) {
      return group_score[a] != group_score[b] ? group_score[a] > group_score[b] : a < b;
    });
    for (int r = c.n_group_used; r < groups; ++r)
      for (int e = group_order[r] * per; e < (group_order[r] + 1) * per; ++e) score[e] = -INFINITY;
  }
  std::iota(order, order + n, 0);
  std::partial_sort(order, order + k, order + n, [&](int a, int b) {
    return score[a] != score[b] ? score[a] > score[b] : a < b;
  });
  double sum = 0.0;
  for (int j = 0; j < k; ++j) sum += probs[order[j]];
  const double norm = c.expert_weights_norm ? std::max(sum, 6.103515625e-5) : 1.0;
  for (int j = 0; j < k; ++j) {
    experts[j] = order[j];
    weights[j] = static_cast<float>(probs[order[j]] / norm * c.expert_weights_scale);
  }
}

// Whether the plain router (softmax, renormalised over the chosen ones, no
// bias or groups) is the model's.
bool plain_routing(const ModelConfig& c, const LayerWeights& w) {
  return c.expert_gating == ExpertGating::Softmax && c.expert_weights_norm && c.n_expert_groups <= 1 &&
         w[TensorKind::FfnExpProbsB].empty();
}

// The whole mixture on the device (Backend::routes_experts): the plain
// router, no expert biases, no shared expert. Each route slot multiplies its
// token's row by its own expert's rows, so nothing comes back mid-step.
bool routes_on_device(const Backend& be, const ModelConfig& c, const LayerWeights& w) {
  return be.routes_experts() && plain_routing(c, w) && c.n_expert_used <= 64 && c.n_ff_shexp == 0 &&
         c.activation != Activation::SiluOai && c.router_input_scale == 0.0f &&
         w[TensorKind::FfnGateUpExps].empty() && w[TensorKind::FfnDownExpsScale].empty() &&
         w[TensorKind::FfnGateExpsBias].empty() && w[TensorKind::FfnUpExpsBias].empty() &&
         w[TensorKind::FfnDownExpsBias].empty();
}

void expert_ffn_on_device(Backend& be, const ModelConfig& c, const LayerWeights& w, DevicePtr in, DevicePtr out, int n,
                          LayerScratch& s) {
  const int k = c.n_expert_used, slots = n * k;
  be.route_experts(s.router, n, c.n_expert, k, c.expert_weights_scale, s.slot_experts, s.slot_weights);
  be.matmul_routed(w[TensorKind::FfnGateExps], c.n_ff_exp, in, k, s.slot_experts, s.routed_gate, slots);
  be.matmul_routed(w[TensorKind::FfnUpExps], c.n_ff_exp, in, k, s.slot_experts, s.routed_up, slots);
  const int64_t count = static_cast<int64_t>(slots) * c.n_ff_exp;
  if (c.activation == Activation::GeluTanh) be.geglu(s.routed_gate, s.routed_up, s.routed_gate, count);
  else be.swiglu(s.routed_gate, s.routed_up, s.routed_gate, count);
  be.matmul_routed(w[TensorKind::FfnDownExps], c.n_embd, s.routed_gate, 1, s.slot_experts, s.expert_out, slots);
  be.weighted_sum(s.expert_out, s.slot_weights, n, k, c.n_embd, out);
}

}  // namespace

void dense_ffn(Backend& be, const ModelConfig& c, const LayerWeights& w, DevicePtr in, DevicePtr out, int n,
               LayerScratch& s) {
  gated(be, c, w[TensorKind::FfnGate], w[TensorKind::FfnUp], w[TensorKind::FfnDown], in, out, n, s);
}

void expert_ffn(Backend& be, const ModelConfig& c, const LayerWeights& w, DevicePtr in, DevicePtr out, int n,
                LayerScratch& s, DevicePtr router_in) {
  const int k = c.n_expert_used, width = c.n_embd;
  if (c.router_input_scale > 0.0f) {
    // Gemma 4's router reads the layer's input normalised and scaled by
    // ffn_gate_inp.scale (and 1/sqrt(n_embd), applied to the logits below).
    be.rmsnorm(router_in, w[TensorKind::FfnGateInpScale], s.gathered, n, width, c.norm_eps);
    be.matmul(w[TensorKind::FfnGateInp], s.gathered, s.router, n);
  } else {
    be.matmul(w[TensorKind::FfnGateInp], in, s.router, n);
  }
  if (!w[TensorKind::FfnGateInpBias].empty()) be.add_bias(s.router, w[TensorKind::FfnGateInpBias], n, c.n_expert);
  if (routes_on_device(be, c, w)) return expert_ffn_on_device(be, c, w, in, out, n, s);
  be.download(s.router_host.data(), s.router, static_cast<size_t>(n) * c.n_expert * sizeof(float));
  const size_t n_routes = static_cast<size_t>(n) * k;
  const bool plain = plain_routing(c, w);
  const float* bias = w[TensorKind::FfnExpProbsB].empty() ? nullptr : w[TensorKind::FfnExpProbsB].f32();
  if (c.router_input_scale > 0.0f)
    for (size_t i = 0; i < static_cast<size_t>(n) * c.n_expert; ++i) s.router_host[i] *= c.router_input_scale;
  // Each expert's output scale (gemma4), applied with its weight.
  const float* down_scale = w[TensorKind::FfnDownExpsScale].empty() ? nullptr : w[TensorKind::FfnDownExpsScale].f32();
  for (int t = 0; t < n; ++t) {
    const float* logits = s.router_host.data() + static_cast<size_t>(t) * c.n_expert;
    int* experts = &s.route_expert[static_cast<size_t>(t) * k];
    float* weights = &s.route_weight[static_cast<size_t>(t) * k];
    if (plain)
      route(logits, c.n_expert, k, c.expert_weights_scale, s.expert_order.data(), experts, weights);
    else
      route_biased(logits, bias, c, s, experts, weights);
    if (down_scale)
      for (int j = 0; j < k; ++j) weights[j] *= down_scale[experts[j]];
  }

  // Each expert once, over the rows routed to it; then the slots to the
  // host (a tensor group member runs its experts and fetches the others').
  std::vector<int>& rows = s.expert_rows;
  const size_t row_bytes = static_cast<size_t>(width) * sizeof(float);
  auto run = [&](int e) {
    rows.clear();
    for (size_t i = 0; i < n_routes; ++i)
      if (s.route_expert[i] == e) rows.push_back(static_cast<int>(i));
    if (rows.empty()) return;
    const int m = static_cast<int>(rows.size());
    for (int r = 0; r < m; ++r) be.copy(s.gathered + static_cast<int64_t>(r) * width, in + (rows[r] / k) * width, row_bytes);
    const DevicePtr result = s.proj;  // free until the weighted sum below
    const ExpertBiases bias{expert_bias(w[TensorKind::FfnGateExpsBias], e), expert_bias(w[TensorKind::FfnUpExpsBias], e),
                            expert_bias(w[TensorKind::FfnDownExpsBias], e)};
    const bool stacked = !w[TensorKind::FfnGateUpExps].empty();
    const Matrix gate = stacked ? Matrix{} : expert(w[TensorKind::FfnGateExps], e, c.n_ff_exp);
    const Matrix up = stacked ? expert(w[TensorKind::FfnGateUpExps], e, 2 * int64_t{c.n_ff_exp})
                              : expert(w[TensorKind::FfnUpExps], e, c.n_ff_exp);
    gated(be, c, gate, up, expert(w[TensorKind::FfnDownExps], e, c.n_embd), s.gathered, result, m, s, bias);
    for (int r = 0; r < m; ++r) be.copy(s.expert_out + static_cast<int64_t>(rows[r]) * width, result + r * width, row_bytes);
  };
  be.run_routed_experts({s.route_expert.data(), n_routes, c.n_expert, width}, run, s.expert_out,
                        s.expert_out_host.data());

  // A shared expert sees every row; its gate, where it has one (qwen35moe,
  // not deepseek2), is one logit per row.
  const bool shared = c.n_ff_shexp > 0;
  const bool shared_gated = shared && !w[TensorKind::FfnGateInpShexp].empty();
  if (shared) {
    gated(be, c, w[TensorKind::FfnGateShexp], w[TensorKind::FfnUpShexp], w[TensorKind::FfnDownShexp], in, s.gathered,
          n, s);
    be.download(s.shared_host.data(), s.gathered, static_cast<size_t>(n) * row_bytes);
  }
  if (shared_gated) {
    be.matmul(w[TensorKind::FfnGateInpShexp], in, s.router, n);
    be.download(s.shared_gate_host.data(), s.router, static_cast<size_t>(n) * sizeof(float));
  }

  // Each token sums its experts in rank order, then the shared one, on the host.
  for (int t = 0; t < n; ++t) {
    float* o = s.sum_host.data() + static_cast<size_t>(t) * width;
    std::fill(o, o + width, 0.0f);
    for (int j = 0; j < k; ++j) {
      const size_t slot = static_cast<size_t>(t) * k + j;
      const float weight = s.route_weight[slot];
      const float* y = s.expert_out_host.data() + slot * width;
      for (int i = 0; i < width; ++i) o[i] += weight * y[i];
    }
    if (shared) {
      const float gate = shared_gated ? sigmoid(s.shared_gate_host[t]) : 1.0f;
      const float* y = s.shared_host.data() + static_cast<size_t>(t) * width;
      for (int i = 0; i < width; ++i) o[i] += gate * y[i];
    }
  }
  be.upload(out, s.sum_host.data(), static_cast<size_t>(n) * row_bytes);
}

void dense_and_expert_ffn(Backend& be, const ModelConfig& c, const LayerWeights& w, DevicePtr x, int n,
                          LayerScratch& s) {
  using K = TensorKind;
  // The dense branch first, on ffn_norm(x) (in s.norm), into its own rows:
  // the experts use s.proj and the FFN rows as they go.
  dense_ffn(be, c, w, s.norm, s.branch, n, s);
  be.rmsnorm(s.branch, w[K::FfnPostNorm1], s.branch, n, c.n_embd, c.norm_eps);
  be.rmsnorm(x, w[K::FfnPreNorm2], s.norm, n, c.n_embd, c.norm_eps);
  expert_ffn(be, c, w, s.norm, s.proj, n, s, x);
  be.rmsnorm(s.proj, w[K::FfnPostNorm2], s.proj, n, c.n_embd, c.norm_eps);
  be.add(s.proj, s.branch, static_cast<int64_t>(n) * c.n_embd);
}

}  // namespace shoal
