#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/attention.h"
#include "tensor/dequantize.h"
#include "tensor/gemm.h"
#include "tensor/vec_dot.h"
#include "util/error.h"

namespace shoal {

CpuBackend::CpuBackend(ThreadPool& pool, int max_tokens, int64_t max_cols)
    : pool_(pool), max_tokens_(max_tokens), max_cols_(max_cols) {
  activation_scratch_.resize(scratch_bytes(max_tokens, max_cols));
}

size_t CpuBackend::scratch_bytes(int max_tokens, int64_t max_cols) {
  // Worst case is f32 activations (4 bytes a value); quantized forms are smaller.
  return static_cast<size_t>(max_tokens) * static_cast<size_t>(max_cols) * sizeof(float) + 64;
}

void CpuBackend::matmul(const Matrix& w, const float* x, float* y, int n_tokens) {
  if (n_tokens > max_tokens_ || w.cols > max_cols_)
    fail("internal: matmul of {} tokens x {} exceeds the scratch ({} x {})", n_tokens, w.cols, max_tokens_, max_cols_);
  const DType act_type = activation_dtype(w.type);
  const size_t act_stride = row_bytes(act_type, w.cols);
  const void* act = x;
  if (act_type != DType::F32) {
    uint8_t* scratch = activation_scratch_.data();
    pool_.parallel_for(n_tokens, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) quantize_activation(w.type, x + t * w.cols, scratch + t * act_stride, w.cols);
    });
    act = scratch;
  }
  const auto* act_bytes = static_cast<const uint8_t*>(act);
  // Split by output rows; every row meets every token (gemm_rows tiles them).
  pool_.parallel_for(w.rows, 16, [&](int64_t r0, int64_t r1) {
    gemm_rows(w, r0, r1, act_bytes, act_stride, n_tokens, y, w.rows);
  });
}

namespace {
// Element-wise ops run on one thread below this many values: waking the
// pool costs more than the work (a decode step's rows are ~1000 values).
constexpr int64_t kParallelElements = 1 << 14;
}  // namespace

void CpuBackend::for_elements(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n < kParallelElements) return fn(0, n);
  pool_.parallel_for(n, 1024, fn);
}

void CpuBackend::rmsnorm(const float* x, const float* weight, float* y, int n_tokens, int n, float eps) {
  for_elements(static_cast<int64_t>(n_tokens) * n, [&](int64_t e0, int64_t e1) {
    // Whole rows only: a row's sum is one sequence of additions.
    for (int64_t t = (e0 + n - 1) / n; t * n < e1 && t < n_tokens; ++t) {
      const float* xr = x + t * n;
      float* yr = y + t * n;
      double sum = 0.0;  // double: the mean of squares of a wide row loses bits in f32
      for (int i = 0; i < n; ++i) sum += static_cast<double>(xr[i]) * xr[i];
      const float inv = static_cast<float>(1.0 / std::sqrt(sum / n + eps));
      for (int i = 0; i < n; ++i) yr[i] = xr[i] * inv * weight[i];
    }
  });
}

void CpuBackend::rope(float* x, int n_tokens, int n_heads, const int32_t* positions, const RopeParams& p) {
  const int half = p.rope_dim / 2;
  // The angle per position of each pair, once per call (not per token).
  rope_freqs_.resize(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) rope_freqs_[i] = std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.rope_dim);
  for_elements(static_cast<int64_t>(n_tokens) * n_heads * p.head_dim, [&](int64_t e0, int64_t e1) {
    const int64_t row = static_cast<int64_t>(n_heads) * p.head_dim;
    for (int64_t t = (e0 + row - 1) / row; t * row < e1 && t < n_tokens; ++t) {
      const double pos = static_cast<double>(positions[t]) * p.freq_scale;
      for (int i = 0; i < half; ++i) {
        double theta = pos * rope_freqs_[i];
        if (p.freq_factors) theta /= p.freq_factors[i];
        const float c = static_cast<float>(std::cos(theta)), s = static_cast<float>(std::sin(theta));
        for (int h = 0; h < n_heads; ++h) {
          float* head = x + (t * n_heads + h) * p.head_dim;
          const int a = p.neox ? i : 2 * i, b = p.neox ? i + half : 2 * i + 1;
          const float x0 = head[a], x1 = head[b];
          head[a] = x0 * c - x1 * s;
          head[b] = x0 * s + x1 * c;
        }
      }
    }
  });
}

void CpuBackend::attention(const float* q, const KvLayerView& kv, const int32_t* seq_ids, const int32_t* positions,
                           int n_tokens, const AttentionShape& shape, float* out) {
  cpu_attention(pool_, q, kv, seq_ids, positions, n_tokens, shape, out, attention_scratch_);
}

void CpuBackend::swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for_elements(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  });
}

void CpuBackend::geglu(const float* gate, const float* up, float* out, int64_t n) {
  constexpr double kSqrt2OverPi = 0.79788456080286535588;
  for_elements(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const double x = gate[i];
      const double g = 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * x * (1.0 + 0.044715 * x * x)));
      out[i] = static_cast<float>(g) * up[i];
    }
  });
}

void CpuBackend::scale(float* x, float s, int64_t n) {
  for_elements(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) x[i] *= s;
  });
}

void CpuBackend::softcap(float* x, float cap, int64_t n) {
  for_elements(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) x[i] = cap * std::tanh(x[i] / cap);
  });
}

void CpuBackend::add(float* y, const float* x, int64_t n) {
  for_elements(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) y[i] += x[i];
  });
}

void CpuBackend::add_bias(float* y, const float* bias, int n_tokens, int n) {
  for_elements(static_cast<int64_t>(n_tokens) * n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) y[i] += bias[i % n];
  });
}

void CpuBackend::get_rows(const Matrix& w, const int32_t* ids, int n, float* out) {
  for (int t = 0; t < n; ++t) {
    if (ids[t] < 0 || ids[t] >= w.rows) fail("token id {} is outside the vocabulary of {}", ids[t], w.rows);
    dequantize_row(w.type, w.row(ids[t]), out + static_cast<int64_t>(t) * w.cols, w.cols);
  }
}

}  // namespace shoal
