#include "model/transformer_layer.h"

#include <cmath>

namespace shoal {

LayerScratch::LayerScratch(const ModelConfig& c, int max_tokens) {
  auto alloc = [&](int width) { return std::unique_ptr<float[]>(new float[static_cast<size_t>(max_tokens) * width]); };
  norm = alloc(c.n_embd);
  q = alloc(c.q_width());
  attn = alloc(c.q_width());
  k = alloc(c.kv_width());
  v = alloc(c.kv_width());
  gate = alloc(c.n_ff);
  up = alloc(c.n_ff);
  proj = alloc(c.n_embd);
}

uint64_t LayerScratch::bytes_for(const ModelConfig& c, int max_tokens) {
  const uint64_t widths = 2ull * c.n_embd + 2ull * c.q_width() + 2ull * c.kv_width() + 2ull * c.n_ff;
  return static_cast<uint64_t>(max_tokens) * widths * sizeof(float);
}

void forward_layer(Backend& be, const ModelConfig& c, const LayerWeights& w, const Matrix& rope_freqs, KvCache& kv,
                   int kv_layer, const Batch& batch, float* x, LayerScratch& s) {
  const int n = batch.size();
  const int32_t* pos = batch.positions.data();
  const int32_t* seq = batch.seq_ids.data();

  // Attention block.
  be.rmsnorm(x, w.attn_norm.f32(), s.norm.get(), n, c.n_embd, c.norm_eps);
  be.matmul(w.wq, s.norm.get(), s.q.get(), n);
  be.matmul(w.wk, s.norm.get(), s.k.get(), n);
  be.matmul(w.wv, s.norm.get(), s.v.get(), n);
  if (c.qkv_bias) {
    be.add_bias(s.q.get(), w.bq.f32(), n, c.q_width());
    be.add_bias(s.k.get(), w.bk.f32(), n, c.kv_width());
    be.add_bias(s.v.get(), w.bv.f32(), n, c.kv_width());
  }
  RopeParams rope{c.head_dim, c.rope_dim, c.rope_freq_base, c.rope_freq_scale, c.rope_style == RopeStyle::Neox,
                  rope_freqs.empty() ? nullptr : rope_freqs.f32()};
  be.rope(s.q.get(), n, c.n_head, pos, rope);
  be.rope(s.k.get(), n, c.n_head_kv, pos, rope);
  kv.store(kv_layer, s.k.get(), s.v.get(), seq, pos, n);
  AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  be.attention(s.q.get(), kv.layer(kv_layer), seq, pos, n, shape, s.attn.get());
  be.matmul(w.wo, s.attn.get(), s.proj.get(), n);
  be.add(x, s.proj.get(), static_cast<int64_t>(n) * c.n_embd);

  // Feed-forward block (SwiGLU).
  be.rmsnorm(x, w.ffn_norm.f32(), s.norm.get(), n, c.n_embd, c.norm_eps);
  be.matmul(w.ffn_gate, s.norm.get(), s.gate.get(), n);
  be.matmul(w.ffn_up, s.norm.get(), s.up.get(), n);
  be.swiglu(s.gate.get(), s.up.get(), s.gate.get(), static_cast<int64_t>(n) * c.n_ff);
  be.matmul(w.ffn_down, s.gate.get(), s.proj.get(), n);
  be.add(x, s.proj.get(), static_cast<int64_t>(n) * c.n_embd);
}

}  // namespace shoal
