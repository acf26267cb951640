#pragma once
// The narrow boundary between the model and the hardware: a handful of ops
// on activations in the backend's memory. The CPU backend's memory is host
// memory; a CUDA backend implements the same calls on device buffers.
//
// Every op computes each output row from its own input row (or, for
// attention, from its own query and the cache), so results never depend on
// how many tokens are in a batch or how work is spread over threads.
#include <cstdint>
#include <string>

#include "tensor/matrix.h"

namespace shoal {

struct RopeParams {
  int head_dim = 0;
  int rope_dim = 0;          // leading dims that rotate
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;   // positions are multiplied by this
  bool neox = false;         // rotate halves instead of adjacent pairs
  const float* freq_factors = nullptr;  // [rope_dim/2] divisors, or null
};

// One layer's KV cache as the attention op sees it. Entry (seq, pos) of K is
// one row of `width` values in k_type (F32, F16 or Q8_0) at
// k + seq * k_seq_stride + slot(pos) * k_row_bytes; V likewise.
struct KvLayerView {
  uint8_t* k = nullptr;
  uint8_t* v = nullptr;
  DType k_type = DType::F32;
  DType v_type = DType::F32;
  size_t k_row_bytes = 0;
  size_t v_row_bytes = 0;
  size_t k_seq_stride = 0;  // bytes between sequences
  size_t v_seq_stride = 0;
  int width = 0;            // n_head_kv * head_dim
  int ring = 0;             // > 0: a sliding-window layer keeps its positions in a ring of this many
  size_t slot(int pos) const { return static_cast<size_t>(ring > 0 ? pos % ring : pos); }
  uint8_t* k_row(int seq, int pos) const { return k + seq * k_seq_stride + slot(pos) * k_row_bytes; }
  uint8_t* v_row(int seq, int pos) const { return v + seq * v_seq_stride + slot(pos) * v_row_bytes; }
};

struct AttentionShape {
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  float scale = 1.0f;  // applied to q·k
  int window = 0;      // attend to the last `window` positions only; 0: all
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // y[t][r] = W[r] · x[t]; x is [n_tokens][w.cols], y is [n_tokens][w.rows].
  virtual void matmul(const Matrix& w, const float* x, float* y, int n_tokens) = 0;
  // y[t] = x[t] / rms(x[t]) * weight, over rows of n values.
  virtual void rmsnorm(const float* x, const float* weight, float* y, int n_tokens, int n, float eps) = 0;
  // Rotates each of n_heads heads of x[t] by positions[t]; x is [n_tokens][n_heads * head_dim].
  virtual void rope(float* x, int n_tokens, int n_heads, const int32_t* positions, const RopeParams& p) = 0;
  // Causal attention: query t (seq seq_ids[t], position positions[t]) attends
  // over cache entries 0..positions[t] of its sequence. q, out: [n_tokens][n_head * head_dim].
  virtual void attention(const float* q, const KvLayerView& kv, const int32_t* seq_ids, const int32_t* positions,
                         int n_tokens, const AttentionShape& shape, float* out) = 0;
  // out[i] = silu(gate[i]) * up[i]
  virtual void swiglu(const float* gate, const float* up, float* out, int64_t n) = 0;
  // out[i] = gelu(gate[i]) * up[i], gelu in its tanh form
  virtual void geglu(const float* gate, const float* up, float* out, int64_t n) = 0;
  // x[i] *= s
  virtual void scale(float* x, float s, int64_t n) = 0;
  // x[i] = cap * tanh(x[i] / cap)
  virtual void softcap(float* x, float cap, int64_t n) = 0;
  // y[i] += x[i]
  virtual void add(float* y, const float* x, int64_t n) = 0;
  // y[t][i] += bias[i] over rows of n values.
  virtual void add_bias(float* y, const float* bias, int n_tokens, int n) = 0;
  // out[t] = dequantized row ids[t] of w.
  virtual void get_rows(const Matrix& w, const int32_t* ids, int n, float* out) = 0;
};

}  // namespace shoal
