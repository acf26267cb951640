#include "model/transformer_layer.h"

#include "model/feed_forward.h"

namespace shoal {
namespace {

int ff_width(const ModelConfig& c) { return std::max(c.n_ff, c.n_ff_exp); }

}  // namespace

LayerScratch::LayerScratch(const ModelConfig& c, int max_tokens) {
  auto alloc = [&](int64_t width) {
    return std::unique_ptr<float[]>(new float[static_cast<size_t>(max_tokens) * width]);
  };
  norm = alloc(c.n_embd);
  q = alloc(c.q_width());
  attn = alloc(c.q_width());
  k = alloc(c.kv_width());
  v = alloc(c.kv_width());
  gate = alloc(ff_width(c));
  up = alloc(ff_width(c));
  proj = alloc(c.n_embd);
  if (c.n_expert > 0) {
    router = alloc(c.n_expert);
    gathered = alloc(c.n_embd);
    expert_out = alloc(static_cast<int64_t>(c.n_expert_used) * c.n_embd);
    route_expert.resize(static_cast<size_t>(max_tokens) * c.n_expert_used);
    route_weight.resize(route_expert.size());
    expert_order.resize(c.n_expert);
    expert_rows.reserve(max_tokens);
  }
}

uint64_t LayerScratch::bytes_for(const ModelConfig& c, int max_tokens) {
  uint64_t widths = 2ull * c.n_embd + 2ull * c.q_width() + 2ull * c.kv_width() + 2ull * ff_width(c);
  if (c.n_expert > 0) widths += c.n_expert + c.n_embd + static_cast<uint64_t>(c.n_expert_used) * c.n_embd;
  return static_cast<uint64_t>(max_tokens) * widths * sizeof(float);
}

void forward_layer(Backend& be, const ModelConfig& c, int layer, const LayerWeights& w, const Matrix& rope_freqs,
                   KvCache& kv, int kv_layer, const Batch& batch, float* x, LayerScratch& s) {
  using K = TensorKind;
  const int n = batch.size();
  const int64_t residual = static_cast<int64_t>(n) * c.n_embd;
  const int32_t* pos = batch.positions.data();
  const int32_t* seq = batch.seq_ids.data();
  const LayerSettings& settings = c.layers[layer];

  // Attention block.
  be.rmsnorm(x, w[K::AttnNorm].f32(), s.norm.get(), n, c.n_embd, c.norm_eps);
  be.matmul(w[K::AttnQ], s.norm.get(), s.q.get(), n);
  be.matmul(w[K::AttnK], s.norm.get(), s.k.get(), n);
  be.matmul(w[K::AttnV], s.norm.get(), s.v.get(), n);
  // Each bias the layer has (qwen2 has all three; llama.cpp applies any).
  if (!w[K::AttnQBias].empty()) be.add_bias(s.q.get(), w[K::AttnQBias].f32(), n, c.q_width());
  if (!w[K::AttnKBias].empty()) be.add_bias(s.k.get(), w[K::AttnKBias].f32(), n, c.kv_width());
  if (!w[K::AttnVBias].empty()) be.add_bias(s.v.get(), w[K::AttnVBias].f32(), n, c.kv_width());
  if (!w[K::AttnQNorm].empty()) {  // per-head RMSNorm before rope (qwen3, gemma3)
    be.rmsnorm(s.q.get(), w[K::AttnQNorm].f32(), s.q.get(), n * c.n_head, c.head_dim, c.norm_eps);
    be.rmsnorm(s.k.get(), w[K::AttnKNorm].f32(), s.k.get(), n * c.n_head_kv, c.head_dim, c.norm_eps);
  }
  RopeParams rope{c.head_dim,
                  c.rope_dim,
                  settings.rope_freq_base,
                  settings.rope_freq_scale,
                  c.rope_style == RopeStyle::Neox,
                  rope_freqs.empty() ? nullptr : rope_freqs.f32()};
  be.rope(s.q.get(), n, c.n_head, pos, rope);
  be.rope(s.k.get(), n, c.n_head_kv, pos, rope);
  kv.store(kv_layer, s.k.get(), s.v.get(), seq, pos, n);
  AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, c.attn_scale, settings.window};
  be.attention(s.q.get(), kv.layer(kv_layer), seq, pos, n, shape, s.attn.get());
  be.matmul(w[K::AttnOutput], s.attn.get(), s.proj.get(), n);
  if (!w[K::AttnPostNorm].empty())
    be.rmsnorm(s.proj.get(), w[K::AttnPostNorm].f32(), s.proj.get(), n, c.n_embd, c.norm_eps);
  be.add(x, s.proj.get(), residual);

  // Feed-forward block.
  be.rmsnorm(x, w[K::FfnNorm].f32(), s.norm.get(), n, c.n_embd, c.norm_eps);
  if (w[K::FfnGateInp].empty())
    dense_ffn(be, c, w, s.norm.get(), s.proj.get(), n, s);
  else
    expert_ffn(be, c, w, s.norm.get(), s.proj.get(), n, s);
  if (!w[K::FfnPostNorm].empty())
    be.rmsnorm(s.proj.get(), w[K::FfnPostNorm].f32(), s.proj.get(), n, c.n_embd, c.norm_eps);
  be.add(x, s.proj.get(), residual);
}

}  // namespace shoal
