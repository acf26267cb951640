#include "model/transformer_layer.h"

#include "model/feed_forward.h"

namespace shoal {
namespace {

int ff_width(const ModelConfig& c) { return std::max({c.n_ff, c.n_ff_shared, c.n_ff_exp, c.n_ff_shexp}); }
int mix_width(const ModelConfig& c) { return std::max(c.max_q_width(), c.delta.value_width()); }
// Latent attention's per-head slices: a head's nope query or latent output
// in, its absorbed query or value out.
int head_in_width(const ModelConfig& c) { return std::max(c.mla.qk_nope, c.mla.kv_lora_rank); }
int head_out_width(const ModelConfig& c) { return std::max(c.mla.kv_lora_rank, c.mla.v_head_dim); }

// Row rows[i] of buf (rows of `width` floats) to row i, i ascending: no
// source row is overwritten before it is read, since rows[i] >= i.
void gather_rows(Backend& be, DevicePtr buf, int64_t width, const std::vector<int>& rows) {
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i] != static_cast<int>(i))
      be.copy(buf + static_cast<int64_t>(i) * width, buf + rows[i] * width, width * sizeof(float));
}
// The reverse: row i back to row rows[i], i descending.
void scatter_rows(Backend& be, DevicePtr buf, int64_t width, const std::vector<int>& rows) {
  for (size_t i = rows.size(); i-- > 0;)
    if (rows[i] != static_cast<int>(i))
      be.copy(buf + rows[i] * width, buf + static_cast<int64_t>(i) * width, width * sizeof(float));
}

}  // namespace

LayerScratch::LayerScratch(Backend& be, const ModelConfig& c, int max_tokens) {
  buffer = be.allocate(bytes_for(c, max_tokens));
  DevicePtr next{buffer.get(), 0};
  auto take = [&](int64_t width) {
    const DevicePtr p = next;
    next = next + static_cast<int64_t>(max_tokens) * width;
    return p;
  };
  x = take(c.n_embd);
  norm = take(c.n_embd);
  q = take(c.max_q_width());
  attn = take(mix_width(c));
  k = take(c.max_kv_width());
  v = take(c.max_kv_width());
  gate = take(ff_width(c));
  up = take(ff_width(c));
  proj = take(c.n_embd);
  if (c.has(TensorKind::FfnGateUpExps)) gate_up = take(2 * int64_t{c.n_ff_exp});
  if (c.has(TensorKind::FfnPreNorm2)) branch = take(c.n_embd);
  if (c.n_embd_per_layer > 0) {
    ple_gate = take(c.n_embd_per_layer);
    ple_input = take(c.n_embd_per_layer);
    wide = take(c.activation_width());
  }
  if (c.q_gate) {
    q_and_gate = take(2 * c.q_width());
    q_gate = take(c.q_width());
  }
  if (c.latent_attention()) {
    q_heads = take(c.q_proj_width());
    q_low = take(std::max(c.mla.q_lora_rank, 1));
    head_in = take(head_in_width(c));
    head_out = take(head_out_width(c));
  }
  if (c.has_recurrent_layers()) {
    mixed = take(c.delta.conv_width());
    z = take(c.delta.value_width());
    alpha = take(c.delta.n_v_heads);
    beta = take(c.delta.n_v_heads);
    beta_alpha = take(2 * c.delta.n_v_heads);
  }
  if (c.n_expert > 0) {
    router = take(c.n_expert);
    gathered = take(c.n_embd);
    expert_out = take(static_cast<int64_t>(c.n_expert_used) * c.n_embd);
    router_host.resize(static_cast<size_t>(max_tokens) * c.n_expert);
    expert_out_host.resize(static_cast<size_t>(max_tokens) * c.n_expert_used * c.n_embd);
    sum_host.resize(static_cast<size_t>(max_tokens) * c.n_embd);
    if (c.n_ff_shexp > 0) {
      shared_host.resize(static_cast<size_t>(max_tokens) * c.n_embd);
      shared_gate_host.resize(max_tokens);
    }
    route_expert.resize(static_cast<size_t>(max_tokens) * c.n_expert_used);
    route_weight.resize(route_expert.size());
    expert_order.resize(c.n_expert);
    expert_probs.resize(c.n_expert);
    expert_scores.resize(c.n_expert);
    group_scores.resize(std::max(c.n_expert_groups, 0));
    group_order.resize(group_scores.size());
    expert_rows.reserve(max_tokens);
    if (be.routes_experts()) {
      routed_buffer = be.allocate(routed_bytes_for(c, max_tokens));
      const int64_t slots = static_cast<int64_t>(max_tokens) * c.n_expert_used;
      slot_experts = DevicePtr{routed_buffer.get(), 0};
      slot_weights = slot_experts + slots;
      routed_gate = slot_weights + slots;
      routed_up = routed_gate + slots * c.n_ff_exp;
    }
  }
}

uint64_t LayerScratch::routed_bytes_for(const ModelConfig& c, int max_tokens) {
  return static_cast<uint64_t>(max_tokens) * c.n_expert_used * (2 + 2ull * c.n_ff_exp) * sizeof(float);
}

uint64_t LayerScratch::bytes_for(const ModelConfig& c, int max_tokens) {
  uint64_t widths = 3ull * c.n_embd + c.max_q_width() + mix_width(c) + 2ull * c.max_kv_width() + 2ull * ff_width(c);
  if (c.q_gate) widths += 3ull * c.q_width();
  if (c.has(TensorKind::FfnGateUpExps)) widths += 2ull * c.n_ff_exp;
  if (c.has(TensorKind::FfnPreNorm2)) widths += c.n_embd;
  if (c.n_embd_per_layer > 0) widths += 2ull * c.n_embd_per_layer + c.activation_width();
  if (c.latent_attention())
    widths += static_cast<uint64_t>(c.q_proj_width()) + std::max(c.mla.q_lora_rank, 1) + head_in_width(c) +
              head_out_width(c);
  if (c.has_recurrent_layers())
    widths += static_cast<uint64_t>(c.delta.conv_width()) + c.delta.value_width() + 4ull * c.delta.n_v_heads;
  if (c.n_expert > 0) widths += c.n_expert + c.n_embd + static_cast<uint64_t>(c.n_expert_used) * c.n_embd;
  return static_cast<uint64_t>(max_tokens) * widths * sizeof(float);
}

std::vector<OptionalOp> optional_ops_for(const ModelConfig& c, int begin, int end) {
  std::vector<OptionalOp> ops;
  bool attention = false, recurrent = false;
  for (int l = begin; l < end; ++l) (c.recurrent(l) ? recurrent : attention) = true;
  if (recurrent) ops.push_back(OptionalOp::DeltaNet);
  if (recurrent || (attention && c.q_gate)) ops.push_back(OptionalOp::SigmoidMul);
  if (attention && c.q_gate) ops.push_back(OptionalOp::SplitHalves);
  if (attention && c.has(TensorKind::AttnSinks)) ops.push_back(OptionalOp::AttentionSinks);
  if (c.activation == Activation::SiluOai) ops.push_back(OptionalOp::SwigluOai);
  if (attention && c.latent_attention()) ops.push_back(OptionalOp::LatentAttention);
  if (attention && c.v_norm) ops.push_back(OptionalOp::PlainNorm);
  return ops;
}

namespace {

// Attention over the cache; leaves [n][q_width] in s.attn (false: no row is
// read after this layer, and only the cache was written).
bool attention_block(Backend& be, const ModelConfig& c, int layer, const LayerWeights& w, const Matrix& rope_freqs,
                     const KvLayer& kv, int n, LayerScratch& s, const std::vector<int>* rows_out) {
  using K = TensorKind;
  const LayerSettings& settings = c.layers[layer];
  const AttentionGeometry g = c.attention_of(layer);
  const int q_width = c.n_head * g.head_dim, kv_width = g.n_head_kv * g.head_dim;
  // With an output gate the Q projection holds each head's query and gate side by side.
  // Without attn_v (gemma4's global layers) V is K's projection, before K's norm and rope.
  // A layer that reads an earlier layer's cache (gemma4 E2B/E4B) has only its query.
  const bool reuses = c.kv_source(layer) >= 0;
  const bool v_from_k = !reuses && w[K::AttnV].empty();
  const Backend::MatmulOutput qkv[] = {{&w[K::AttnQ], c.q_gate ? s.q_and_gate : s.q}, {&w[K::AttnK], s.k},
                                       {&w[K::AttnV], s.v}};
  be.matmuls(std::span(qkv, reuses ? 1 : v_from_k ? 2 : 3), s.norm, n);
  if (v_from_k) be.copy(s.v, s.k, static_cast<size_t>(n) * kv_width * sizeof(float));
  if (c.q_gate) be.split_halves(s.q_and_gate, static_cast<int64_t>(n) * c.n_head, g.head_dim, s.q, s.q_gate);
  // Each bias the layer has (qwen2 has all three; llama.cpp applies any).
  if (!w[K::AttnQBias].empty()) be.add_bias(s.q, w[K::AttnQBias], n, q_width);
  if (!w[K::AttnKBias].empty()) be.add_bias(s.k, w[K::AttnKBias], n, kv_width);
  if (!w[K::AttnVBias].empty()) be.add_bias(s.v, w[K::AttnVBias], n, kv_width);
  if (c.qk_norm_whole) {  // RMSNorm over every head at once (minimax-m2)
    be.rmsnorm(s.q, w[K::AttnQNorm], s.q, n, q_width, c.norm_eps);
    be.rmsnorm(s.k, w[K::AttnKNorm], s.k, n, kv_width, c.norm_eps);
  } else if (!w[K::AttnQNorm].empty()) {  // per-head RMSNorm before rope (qwen3, gemma3)
    be.rmsnorm(s.q, w[K::AttnQNorm], s.q, n * c.n_head, g.head_dim, c.norm_eps);
    if (!reuses) be.rmsnorm(s.k, w[K::AttnKNorm], s.k, n * g.n_head_kv, g.head_dim, c.norm_eps);
  }
  if (c.v_norm && !reuses) be.rmsnorm(s.v, Matrix{}, s.v, n * g.n_head_kv, g.head_dim, c.norm_eps);
  RopeParams rope{g.head_dim,
                  g.rope_dim,
                  settings.rope_freq_base,
                  settings.rope_freq_scale,
                  c.rope_style == RopeStyle::Neox,
                  rope_freqs.empty() || !c.layer_rope_freqs(layer) ? nullptr : &rope_freqs,
                  c.yarn};
  be.rope(s.q, n, c.n_head, rope);
  if (!reuses) {
    be.rope(s.k, n, g.n_head_kv, rope);
    be.kv_store(kv, s.k, s.v, n);
  }
  if (rows_out && rows_out->empty()) return false;  // every row's K and V are in the cache: nothing more is read
  AttentionShape shape{c.n_head, g.n_head_kv, g.head_dim, c.attn_scale, settings.window,
                       w[K::AttnSinks].empty() ? nullptr : &w[K::AttnSinks]};
  be.attention(s.q, kv, n, shape, s.attn);
  if (c.q_gate) be.sigmoid_mul(s.attn, s.q_gate, static_cast<int64_t>(n) * q_width);
  return true;
}

// y = W_h x_h for each head h: x_width values at h * x_head of each row of
// x (rows x_row apart) through slice h of the stacked `w`, into y_width
// values at h * y_head of each row of y.
struct HeadSlices {
  DevicePtr at;
  int width;
  int64_t head, row;
};
void per_head_matmul(Backend& be, const Matrix& w, int n_head, const HeadSlices& x, const HeadSlices& y, int n,
                     LayerScratch& s) {
  for (int h = 0; h < n_head; ++h) {
    be.copy_rows(s.head_in, x.width, x.at + h * x.head, x.row, x.width, n);
    be.matmul(stacked_slice(w, h, y.width), s.head_in, s.head_out, n);
    be.copy_rows(y.at + h * y.head, y.row, s.head_out, y.width, y.width, n);
  }
}

// Multi-head latent attention (deepseek2, model/config.h) as llama.cpp
// computes it with the absorbed matrices; leaves [n][n_head * v_head_dim]
// in s.attn, like attention_block.
bool latent_attention_block(Backend& be, const ModelConfig& c, const LayerSettings& settings, const LayerWeights& w,
                            const KvLayer& kv, int n, LayerScratch& s, const std::vector<int>* rows_out) {
  using K = TensorKind;
  const LatentAttentionShape& a = c.mla;
  const int rope = c.rope_dim, query = a.qk_nope + rope, row = c.head_dim, latent = a.kv_lora_rank;
  // The heads' queries [n][n_head][nope | rope], through the low-rank pair or one projection.
  if (a.q_lora_rank > 0) {
    be.matmul(w[K::AttnQA], s.norm, s.q_low, n);
    be.rmsnorm(s.q_low, w[K::AttnQANorm], s.q_low, n, a.q_lora_rank, c.norm_eps);
    be.matmul(w[K::AttnQB], s.q_low, s.q_heads, n);
  } else {
    be.matmul(w[K::AttnQ], s.norm, s.q_heads, n);
  }
  // The cached row [n][latent | rope]: the latent normalised, the rope key rotated.
  be.matmul(w[K::AttnKvAMqa], s.norm, s.k, n);
  be.copy_rows(s.v, latent, s.k, row, latent, n);
  be.rmsnorm(s.v, w[K::AttnKvANorm], s.v, n, latent, c.norm_eps);
  be.copy_rows(s.k, row, s.v, latent, latent, n);
  RopeParams rope_params{query, rope, settings.rope_freq_base, settings.rope_freq_scale, c.rope_style == RopeStyle::Neox,
                         nullptr, c.yarn, a.qk_nope};
  be.rope(s.q_heads, n, c.n_head, rope_params);
  rope_params.head_dim = row;
  rope_params.rope_offset = latent;
  be.rope(s.k, n, 1, rope_params);
  be.kv_store(kv, s.k, s.k, n);
  if (rows_out && rows_out->empty()) return false;
  // Each head's query in the cached row's terms: its nope part absorbed
  // into the latent, its rope part as it is.
  const int64_t heads = c.n_head;
  per_head_matmul(be, w[K::AttnKB], c.n_head, {s.q_heads, a.qk_nope, query, heads * query},
                  {s.q, latent, row, heads * row}, n, s);
  be.copy_rows(s.q + latent, row, s.q_heads + a.qk_nope, query, rope, static_cast<int64_t>(n) * c.n_head);
  const AttentionShape shape{c.n_head, 1, row, c.attn_scale, settings.window, nullptr, latent};
  be.attention(s.q, kv, n, shape, s.attn);
  // Each head's mix of latents through its value matrix, then side by side in s.attn.
  per_head_matmul(be, w[K::AttnVB], c.n_head, {s.attn, latent, latent, heads * latent},
                  {s.q, a.v_head_dim, a.v_head_dim, heads * a.v_head_dim}, n, s);
  be.copy(s.attn, s.q, static_cast<size_t>(n) * c.attn_out_width() * sizeof(float));
  return true;
}

DeltaNetParams delta_net_params(const ModelConfig& c, const LayerWeights& w) {
  using K = TensorKind;
  const DeltaNetShape& d = c.delta;
  return DeltaNetParams{&w[K::SsmConv1d], &w[K::SsmDt],  &w[K::SsmA], d.conv_kernel,
                        d.head_dim,        d.n_k_heads,   d.n_v_heads, c.norm_eps,
                        d.keys_interleaved};
}

// A Gated DeltaNet over its recurrent state; leaves [n][value_width] in
// s.attn: each head's output normalised and gated by silu(z). Every row
// goes through the state, wanted or not; the state keeps what a step that
// may be taken back needs (model/recurrent_state.h).
void delta_net_block(Backend& be, const ModelConfig& c, const LayerWeights& w, const RecurrentState& state, int index,
                     int n, LayerScratch& s) {
  using K = TensorKind;
  const DeltaNetShape& d = c.delta;
  if (w[K::SsmBetaAlpha].empty()) {
    const Backend::MatmulOutput projections[] = {{&w[K::AttnQkv], s.mixed}, {&w[K::AttnGate], s.z},
                                                 {&w[K::SsmAlpha], s.alpha}, {&w[K::SsmBeta], s.beta}};
    be.matmuls(projections, s.norm, n);
  } else {
    // One projection of both (qwen3next): per key head, its value heads'
    // betas then their alphas; each to its own [n][n_v_heads] rows.
    const Backend::MatmulOutput projections[] = {{&w[K::AttnQkv], s.mixed}, {&w[K::AttnGate], s.z},
                                                 {&w[K::SsmBetaAlpha], s.beta_alpha}};
    be.matmuls(projections, s.norm, n);
    const int run = d.n_v_heads / d.n_k_heads;
    const int64_t groups = static_cast<int64_t>(n) * d.n_k_heads;
    be.copy_rows(s.beta, run, s.beta_alpha, 2 * run, run, groups);
    be.copy_rows(s.alpha, run, s.beta_alpha + run, 2 * run, run, groups);
  }
  state.keep(be, index, s.mixed, s.alpha, s.beta);
  be.delta_net(s.mixed, s.alpha, s.beta, state.layer(index), delta_net_params(c, w), n, s.attn);
  be.rmsnorm(s.attn, w[K::SsmNorm], s.attn, n * d.n_v_heads, d.head_dim, c.norm_eps);
  be.swiglu(s.z, s.attn, s.attn, static_cast<int64_t>(n) * d.value_width());
}

// Gemma 4 E2B/E4B: the layer's own input (in the travelling row r at
// s.side, or row rows[r] where only those go on) gates a projection of the
// residual stream: x += norm(proj(gelu(inp_gate x) * input)).
void per_layer_input(Backend& be, const ModelConfig& c, int layer, const LayerWeights& w,
                     const std::vector<int>* rows, int m, LayerScratch& s) {
  using K = TensorKind;
  const int width = c.n_embd_per_layer, stride = c.activation_width();
  const DevicePtr inputs = s.side + static_cast<int64_t>(layer) * width;
  be.matmul(w[K::PerLayerInpGate], s.x, s.ple_gate, m);
  if (rows)
    for (int r = 0; r < m; ++r)
      be.copy(s.ple_input + static_cast<int64_t>(r) * width, inputs + static_cast<int64_t>((*rows)[r]) * stride,
              width * sizeof(float));
  else
    be.copy_rows(s.ple_input, width, inputs, stride, width, m);
  be.geglu(s.ple_gate, s.ple_input, s.ple_gate, static_cast<int64_t>(m) * width);
  be.matmul(w[K::PerLayerProj], s.ple_gate, s.proj, m);
  be.rmsnorm(s.proj, w[K::PerLayerPostNorm], s.proj, m, c.n_embd, c.norm_eps);
  be.add(s.x, s.proj, static_cast<int64_t>(m) * c.n_embd);
}

}  // namespace

void forward_layer(Backend& be, const ModelConfig& c, int layer, const LayerWeights& w, const Matrix& rope_freqs,
                   const SequenceMemory& memory, int index, int n_tokens, LayerScratch& s,
                   const std::vector<int>* rows_out) {
  using K = TensorKind;
  const int n = n_tokens;
  const DevicePtr x = s.x;
  const LayerSettings& settings = c.layers[layer];
  const bool recurrent = settings.kind == LayerKind::DeltaNet;

  // Token mixing: attention or a DeltaNet, into s.attn.
  be.rmsnorm(x, w[K::AttnNorm], s.norm, n, c.n_embd, c.norm_eps);
  if (recurrent) {
    delta_net_block(be, c, w, memory.state, index, n, s);
    if (rows_out && rows_out->empty()) return;
  } else if (c.latent_attention()) {
    if (!latent_attention_block(be, c, settings, w, memory.kv.layer(index), n, s, rows_out)) return;
  } else if (!attention_block(be, c, layer, w, rope_freqs, memory.kv.layer(index), n, s, rows_out)) {
    return;
  }
  const int mixed_width = recurrent ? c.delta.value_width() : c.attn_out_width(layer);
  // From here on each row is on its own: only the rows read after this
  // layer go on, moved to the front (as llama.cpp's last layer does).
  const bool some = rows_out && static_cast<int>(rows_out->size()) < n;
  const int m = some ? static_cast<int>(rows_out->size()) : n;
  if (some) {
    gather_rows(be, s.attn, mixed_width, *rows_out);
    gather_rows(be, x, c.n_embd, *rows_out);
  }
  const int64_t residual = static_cast<int64_t>(m) * c.n_embd;
  be.matmul(w[recurrent ? K::SsmOut : K::AttnOutput], s.attn, s.proj, m);
  if (!recurrent && !w[K::AttnOutputBias].empty()) be.add_bias(s.proj, w[K::AttnOutputBias], m, c.n_embd);
  if (!w[K::AttnPostNorm].empty())
    be.rmsnorm(s.proj, w[K::AttnPostNorm], s.proj, m, c.n_embd, c.norm_eps);
  be.add(x, s.proj, residual);

  // Feed-forward block.
  be.rmsnorm(x, w[K::FfnNorm], s.norm, m, c.n_embd, c.norm_eps);
  if (w[K::FfnGateInp].empty())
    dense_ffn(be, c, w, s.norm, s.proj, m, s);
  else if (w[K::FfnPreNorm2].empty())
    expert_ffn(be, c, w, s.norm, s.proj, m, s);
  else
    dense_and_expert_ffn(be, c, w, x, m, s);
  if (!w[K::FfnPostNorm].empty())
    be.rmsnorm(s.proj, w[K::FfnPostNorm], s.proj, m, c.n_embd, c.norm_eps);
  be.add(x, s.proj, residual);
  if (!w[K::PerLayerInpGate].empty()) per_layer_input(be, c, layer, w, some ? rows_out : nullptr, m, s);
  // Gemma 4's scalar on the layer's output.
  if (!w[K::LayerOutScale].empty()) be.scale(x, w[K::LayerOutScale].f32()[0], residual);
  if (some) scatter_rows(be, x, c.n_embd, *rows_out);
}

bool rewind_delta_nets(Backend& be, const ModelConfig& c, const std::vector<LayerWeights>& layers, int begin, int end,
                       RecurrentState& state, int seq, int n_pos, LayerScratch& s) {
  const std::optional<RecurrentState::Rewind> r = state.rewind_for(seq, n_pos);
  if (!r) return false;
  std::vector<int32_t> seq_ids(r->rows, seq), positions(r->rows);
  for (int i = 0; i < r->rows; ++i) positions[i] = r->first + i;
  be.begin_step(seq_ids.data(), positions.data(), r->rows);
  try {
    for (int l = begin; l < end; ++l) {
      if (!c.recurrent(l)) continue;
      state.restore(be, l - begin, seq, r->rows, s.mixed, s.alpha, s.beta);
      if (r->rows > 0)
        be.delta_net(s.mixed, s.alpha, s.beta, state.layer(l - begin), delta_net_params(c, layers[l]), r->rows, s.attn);
    }
  } catch (...) {
    be.abandon_step();
    throw;
  }
  be.finish_step();
  state.forget(seq);
  return true;
}

}  // namespace shoal
