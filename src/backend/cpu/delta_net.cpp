#include "backend/cpu/delta_net.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/scalar_activations.h"
#include "util/error.h"

namespace shoal {
namespace {

constexpr int kMaxHeadDim = 512;  // ModelConfig::validate's bound

// As llama.cpp's ggml_softplus: x itself where exp would overflow.
float softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }

// Channels [c0, c1) of every row: out = silu(taps . [state, x]), oldest
// input first; the state shifts by one input per row.
void convolve(const DeltaNetParams& p, const DeltaNetStep& s, int64_t c0, int64_t c1) {
  const int width = p.conv_width(), kernel = p.conv_kernel;
  const float* taps = p.conv->f32();
  for (int t = 0; t < s.n_tokens; ++t) {
    float* state = s.conv_state + s.conv_seq_floats * s.seq_ids[t];
    if (s.positions[t] == 0)
      for (int k = 0; k < kernel - 1; ++k) std::fill(state + k * width + c0, state + k * width + c1, 0.0f);
    float* x = s.qkv + static_cast<int64_t>(t) * width;
    for (int64_t c = c0; c < c1; ++c) {
      const float* w = taps + c * kernel;
      float acc = 0.0f;
      for (int k = 0; k < kernel - 1; ++k) acc += state[k * width + c] * w[k];
      acc += x[c] * w[kernel - 1];
      for (int k = 0; k + 1 < kernel - 1; ++k) state[k * width + c] = state[(k + 1) * width + c];
      state[(kernel - 2) * width + c] = x[c];
      x[c] = acc / (1.0f + std::exp(-acc));
    }
  }
}

// x / sqrt(sum x^2 + eps), as llama.cpp's rms_norm(x, eps / n) / sqrt(n).
void l2_normalize(float* x, int n, float eps) {
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(sum + eps));
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

// Value head h over every row, in step order.
void recur(const DeltaNetParams& p, const DeltaNetStep& s, int h) {
  const int hd = p.head_dim, width = p.conv_width(), key_width = p.key_width(), kh = p.key_head_of(h);
  const float dt = p.dt_bias->f32()[h], a = p.a->f32()[h];
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  alignas(64) float sk[kMaxHeadDim], d[kMaxHeadDim], o[kMaxHeadDim];
  for (int t = 0; t < s.n_tokens; ++t) {
    float* __restrict state = s.ssm_state + s.ssm_seq_floats * s.seq_ids[t] + static_cast<size_t>(h) * hd * hd;
    if (s.positions[t] == 0) std::fill(state, state + static_cast<size_t>(hd) * hd, 0.0f);
    const float* row = s.qkv + static_cast<int64_t>(t) * width;
    const float* q = row + kh * hd;
    const float* k = row + key_width + kh * hd;
    const float* v = row + 2 * key_width + h * hd;
    const int64_t head = static_cast<int64_t>(t) * p.n_v_heads + h;
    const float g = std::exp(softplus(s.alpha[head] + dt) * a);
    const float b = sigmoid(s.beta[head]);
    // Decay, and what the decayed state predicts for k.
    std::fill(sk, sk + hd, 0.0f);
    for (int j = 0; j < hd; ++j) {
      float* __restrict col = state + static_cast<size_t>(j) * hd;
      const float kj = k[j];
      for (int i = 0; i < hd; ++i) {
        col[i] *= g;
        sk[i] += col[i] * kj;
      }
    }
    for (int i = 0; i < hd; ++i) d[i] = (v[i] - sk[i]) * b;
    // Write the correction along k, and read the state with q.
    std::fill(o, o + hd, 0.0f);
    for (int j = 0; j < hd; ++j) {
      float* __restrict col = state + static_cast<size_t>(j) * hd;
      const float kj = k[j], qj = q[j];
      for (int i = 0; i < hd; ++i) {
        col[i] += kj * d[i];
        o[i] += col[i] * qj;
      }
    }
    float* y = s.out + static_cast<int64_t>(t) * p.value_width() + h * hd;
    for (int i = 0; i < hd; ++i) y[i] = o[i] * scale;
  }
}

}  // namespace

void cpu_delta_net(ThreadPool& pool, const DeltaNetParams& p, const DeltaNetStep& s) {
  if (p.head_dim <= 0 || p.head_dim > kMaxHeadDim || p.n_k_heads <= 0 || p.n_v_heads % p.n_k_heads != 0 ||
      p.conv_kernel < 2)
    fail("internal: bad DeltaNet sizes");
  const int width = p.conv_width();
  pool.parallel_for(width, 64, [&](int64_t c0, int64_t c1) { convolve(p, s, c0, c1); });
  // q and k of every key head, normalised once for the value heads that share them.
  const int64_t key_heads = static_cast<int64_t>(s.n_tokens) * p.n_k_heads;
  pool.parallel_for(key_heads, 16, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      float* row = s.qkv + (i / p.n_k_heads) * width + (i % p.n_k_heads) * p.head_dim;
      l2_normalize(row, p.head_dim, p.eps);
      l2_normalize(row + p.key_width(), p.head_dim, p.eps);
    }
  });
  pool.parallel_for(p.n_v_heads, 1, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h) recur(p, s, static_cast<int>(h));
  });
}

}  // namespace shoal
