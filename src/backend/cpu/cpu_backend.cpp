#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/attention.h"
#include "backend/cpu/delta_net.h"
#include "backend/cpu/swiglu.h"
#include "backend/rope_angles.h"
#include "backend/scalar_activations.h"
#include "tensor/dequantize.h"
#include "tensor/gemm.h"
#include "tensor/interleave.h"
#include "tensor/vec_dot.h"
#include "util/error.h"
#include "util/system_memory.h"

namespace shoal {

HostBuffer::HostBuffer(size_t bytes) : Buffer(bytes), data_(new uint8_t[bytes]) {}

CpuBackend::CpuBackend(ThreadPool& pool, int max_tokens, int64_t max_cols)
    : pool_(pool), max_tokens_(max_tokens), max_cols_(max_cols) {
  activation_scratch_.resize(scratch_bytes(max_tokens, max_cols));
}

size_t CpuBackend::scratch_bytes(int max_tokens, int64_t max_cols) {
  // Worst case is f32 activations (4 bytes a value); quantized forms are smaller.
  return static_cast<size_t>(max_tokens) * static_cast<size_t>(max_cols) * sizeof(float) + 64;
}

uint64_t CpuBackend::free_memory() const { return read_system_memory().available; }

std::unique_ptr<Buffer> CpuBackend::allocate(size_t bytes) {
  // Uninitialised: a KV cache's pages are touched only as positions fill.
  return std::make_unique<HostBuffer>(bytes);
}

void CpuBackend::upload(DevicePtr dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(host(dst), src, bytes);
}

void CpuBackend::download(void* dst, DevicePtr src, size_t bytes) {
  if (bytes) std::memcpy(dst, host(src), bytes);
}

void CpuBackend::copy(DevicePtr dst, DevicePtr src, size_t bytes) {
  if (bytes) std::memmove(host(dst), host(src), bytes);
}

namespace {

// Whether the matmul reads m faster in groups of eight rows. A group must
// not straddle two slices (two experts' rows).
bool regroupable(const WeightToPrepare& w) {
  const Matrix& m = *w.matrix;
  return !w.rows_only && !m.empty() && !m.interleaved && interleavable(m.type, m.cols) && gemm_reads_groups(m.type) &&
         m.rows >= 8 && w.slice_rows % 8 == 0;
}

}  // namespace

uint64_t CpuBackend::prepare_weights(std::span<const WeightToPrepare> weights, PreparedMemory& keep) {
  uint64_t bytes = 0;
  for (const WeightToPrepare& w : weights) {
    if (!regroupable(w)) continue;
    Matrix& m = *w.matrix;
    std::unique_ptr<uint8_t[]> copy(new uint8_t[m.bytes()]);
    // Whole groups per chunk (the last chunk takes the plain tail); the
    // copy's cost is mostly the first touch of fresh pages, so it runs on
    // every thread.
    const size_t group_bytes = 8 * m.row_stride();
    const int64_t groups = m.rows / 8;
    pool_.parallel_for(groups, 1, [&](int64_t g0, int64_t g1) {
      const int64_t rows = g1 == groups ? m.rows - g0 * 8 : (g1 - g0) * 8;
      interleave_rows(m.type, m.data + g0 * group_bytes, rows, m.cols, copy.get() + g0 * group_bytes);
    });
    m.data = copy.get();
    m.interleaved = true;
    bytes += m.bytes();
    keep.push_back(std::move(copy));
  }
  return bytes;
}

uint64_t CpuBackend::prepared_bytes(std::span<const WeightToPrepare> weights) const {
  uint64_t bytes = 0;
  for (const WeightToPrepare& w : weights)
    if (regroupable(w)) bytes += w.matrix->bytes();
  return bytes;
}

void CpuBackend::begin_step(const int32_t* seq_ids, const int32_t* positions, int n_tokens) {
  step_seq_ids_ = seq_ids;
  step_positions_ = positions;
  step_tokens_ = n_tokens;
}

void CpuBackend::check_step(int n_tokens) const {
  if (!step_positions_ || n_tokens > step_tokens_)
    fail("internal: {} rows need positions but the step has {}", n_tokens, step_tokens_);
}

namespace {
// Element-wise ops run on one thread below this many values: waking the
// pool costs more than the work (a decode step's rows are ~1000 values).
constexpr int64_t kParallelElements = 1 << 14;
}  // namespace

void CpuBackend::matmul(const Matrix& w, DevicePtr x, DevicePtr y, int n_tokens) {
  const MatmulOutput one{&w, y};
  matmuls({&one, 1}, x, n_tokens);
}

void CpuBackend::matmuls(std::span<const MatmulOutput> outputs, DevicePtr x_ptr, int n_tokens) {
  if (outputs.empty()) return;
  const Matrix& first = *outputs[0].w;
  const DType act_type = activation_dtype(first.type);
  for (const MatmulOutput& o : outputs) {
    if (activation_dtype(o.w->type) != act_type || o.w->cols != first.cols) {  // no one conversion serves all
      for (const MatmulOutput& each : outputs) matmuls({&each, 1}, x_ptr, n_tokens);
      return;
    }
  }
  if (n_tokens > max_tokens_ || first.cols > max_cols_)
    fail("internal: matmul of {} tokens x {} exceeds the scratch ({} x {})", n_tokens, first.cols, max_tokens_,
         max_cols_);
  matmul_count_.fetch_add(outputs.size(), std::memory_order_relaxed);
  const float* x = floats(x_ptr);
  const size_t act_stride = row_bytes(act_type, first.cols);
  const uint8_t* act = reinterpret_cast<const uint8_t*>(x);
  if (act_type != DType::F32) {
    uint8_t* scratch = activation_scratch_.data();
    auto quantize = [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        quantize_activation(first.type, x + t * first.cols, scratch + t * act_stride, first.cols);
    };
    // A few tokens (batched decode) take a microsecond or two: less than
    // waking the pool and waiting for it.
    if (static_cast<int64_t>(n_tokens) * first.cols < kParallelElements)
      quantize(0, n_tokens);
    else
      pool_.parallel_for(n_tokens, 1, quantize);
    act = scratch;
  }
  // Split by output rows, in units of kRowUnit rows (whole groups of eight,
  // whole tiles of three float rows: no chunk ends in a one-row tile)
  // numbered across the outputs; every row meets every token (gemm_rows
  // tiles them), and no row's result depends on the range it falls in.
  constexpr int64_t kRowUnit = 24;
  constexpr int kPromptTokens = 16;
  constexpr int kPromptChunksPerThread = 16;
  first_units_.assign(1, 0);
  for (const MatmulOutput& o : outputs) first_units_.push_back(first_units_.back() + (o.w->rows + kRowUnit - 1) / kRowUnit);
  // A prompt's chunk of rows takes milliseconds, and the thread that runs
  // out of chunks first waits for the other's last one: smaller chunks
  // shorten that wait. A decode step's chunks stay as they are (finer ones
  // measured no different there).
  const int chunks_per_thread = n_tokens >= kPromptTokens ? kPromptChunksPerThread : ThreadPool::kChunksPerThread;
  pool_.parallel_for(
      first_units_.back(), 1,
      [&](int64_t u0, int64_t u1) {
        for (size_t i = 0; i < outputs.size(); ++i) {
          const int64_t from = std::max(u0, first_units_[i]), to = std::min(u1, first_units_[i + 1]);
          if (from >= to) continue;
          const Matrix& w = *outputs[i].w;
          gemm_rows(w, (from - first_units_[i]) * kRowUnit, std::min(w.rows, (to - first_units_[i]) * kRowUnit), act,
                    act_stride, n_tokens, floats(outputs[i].y), w.rows);
        }
      },
      chunks_per_thread);
}

void CpuBackend::for_elements(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n < kParallelElements) return fn(0, n);
  pool_.parallel_for(n, 1024, fn);
}

void CpuBackend::rmsnorm(DevicePtr x_ptr, const Matrix& weight_matrix, DevicePtr y_ptr, int n_tokens, int n,
                         float eps) {
  const float* x = floats(x_ptr);
  const float* weight = weight_matrix.empty() ? nullptr : weight_matrix.f32();  // none: OptionalOp::PlainNorm
  float* y = floats(y_ptr);
  for_elements(static_cast<int64_t>(n_tokens) * n, [&](int64_t e0, int64_t e1) {
    // Whole rows only: a row's sum is one sequence of additions.
    for (int64_t t = (e0 + n - 1) / n; t * n < e1 && t < n_tokens; ++t) {
      const float* xr = x + t * n;
      float* yr = y + t * n;
      double sum = 0.0;  // double: the mean of squares of a wide row loses bits in f32
      for (int i = 0; i < n; ++i) sum += static_cast<double>(xr[i]) * xr[i];
      const float inv = static_cast<float>(1.0 / std::sqrt(sum / n + eps));
      if (weight)
        for (int i = 0; i < n; ++i) yr[i] = xr[i] * inv * weight[i];
      else
        for (int i = 0; i < n; ++i) yr[i] = xr[i] * inv;
    }
  });
}

void CpuBackend::rope(DevicePtr x_ptr, int n_tokens, int n_heads, const RopeParams& p) {
  check_step(n_tokens);
  float* x = floats(x_ptr);
  const int32_t* positions = step_positions_;
  const int half = p.rope_dim / 2;
  const RopeAngles angles(p);  // the frequencies once per call, not per token
  for_elements(static_cast<int64_t>(n_tokens) * n_heads * p.head_dim, [&](int64_t e0, int64_t e1) {
    const int64_t row = static_cast<int64_t>(n_heads) * p.head_dim;
    for (int64_t t = (e0 + row - 1) / row; t * row < e1 && t < n_tokens; ++t) {
      for (int i = 0; i < half; ++i) {
        float c, s;
        angles.at(positions[t], i, &c, &s);
        for (int h = 0; h < n_heads; ++h) {
          float* head = x + (t * n_heads + h) * p.head_dim + p.rope_offset;
          const int a = p.neox ? i : 2 * i, b = p.neox ? i + half : 2 * i + 1;
          const float x0 = head[a], x1 = head[b];
          head[a] = x0 * c - x1 * s;
          head[b] = x0 * s + x1 * c;
        }
      }
    }
  });
}

namespace {
// f32 row -> a KV row of `type` (F32, F16 or Q8_0).
void encode_kv_row(DType type, const float* src, uint8_t* dst, int n) {
  switch (type) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::F16: {
      auto* h = reinterpret_cast<uint16_t*>(dst);
      for (int i = 0; i < n; ++i) h[i] = f32_to_f16(src[i]);
      return;
    }
    default: quantize_activation(DType::Q8_0, src, dst, n); return;  // Q8_0 weights pair with Q8_0
  }
}

KvLayerView host_view(const KvLayer& kv) { return kv.with(CpuBackend::host(kv.k), CpuBackend::host(kv.v)); }
}  // namespace

void CpuBackend::kv_store(const KvLayer& kv_layer, DevicePtr k_ptr, DevicePtr v_ptr, int n_tokens) {
  check_step(n_tokens);
  const KvLayerView kv = host_view(kv_layer);
  const float* k = floats(k_ptr);
  const float* v = floats(v_ptr);
  for (int t = 0; t < n_tokens; ++t) {
    const size_t row = static_cast<size_t>(t) * kv.width;
    encode_kv_row(kv.k_type, k + row, kv.k_row(step_seq_ids_[t], step_positions_[t]), kv.width);
    if (!kv.v_in_k) encode_kv_row(kv.v_type, v + row, kv.v_row(step_seq_ids_[t], step_positions_[t]), kv.width);
  }
}

void CpuBackend::attention(DevicePtr q, const KvLayer& kv, int n_tokens, const AttentionShape& shape, DevicePtr out) {
  check_step(n_tokens);
  cpu_attention(pool_, floats(q), host_view(kv), step_seq_ids_, step_positions_, n_tokens, shape, floats(out),
                attention_scratch_);
}

void CpuBackend::swiglu(DevicePtr gate_ptr, DevicePtr up_ptr, DevicePtr out_ptr, int64_t n) {
  const float* gate = floats(gate_ptr);
  const float* up = floats(up_ptr);
  float* out = floats(out_ptr);
  for_elements(n, [&](int64_t i0, int64_t i1) { cpu_swiglu(gate + i0, up + i0, out + i0, i1 - i0); });
}

void CpuBackend::geglu(DevicePtr gate_ptr, DevicePtr up_ptr, DevicePtr out_ptr, int64_t n) {
  const float* gate = floats(gate_ptr);
  const float* up = floats(up_ptr);
  float* out = floats(out_ptr);
  constexpr double kSqrt2OverPi = 0.79788456080286535588;
  for_elements(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const double x = gate[i];
      const double g = 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * x * (1.0 + 0.044715 * x * x)));
      out[i] = static_cast<float>(g) * up[i];
    }
  });
}

void CpuBackend::scale(DevicePtr x_ptr, float s, int64_t n) {
  float* x = floats(x_ptr);
  for_elements(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) x[i] *= s;
  });
}

void CpuBackend::softcap(DevicePtr x_ptr, float cap, int64_t n) {
  float* x = floats(x_ptr);
  for_elements(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) x[i] = cap * std::tanh(x[i] / cap);
  });
}

void CpuBackend::add(DevicePtr y_ptr, DevicePtr x_ptr, int64_t n) {
  float* y = floats(y_ptr);
  const float* x = floats(x_ptr);
  for_elements(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) y[i] += x[i];
  });
}

void CpuBackend::add_bias(DevicePtr y_ptr, const Matrix& bias_matrix, int n_tokens, int n) {
  float* y = floats(y_ptr);
  const float* bias = bias_matrix.f32();
  for_elements(static_cast<int64_t>(n_tokens) * n, [&](int64_t i0, int64_t i1) {
    // A row's piece at a time: no division per element, and a loop the
    // compiler vectorises.
    for (int64_t i = i0; i < i1;) {
      const int64_t row_start = i - i % n, stop = std::min(i1, row_start + n);
      for (int64_t k = i; k < stop; ++k) y[k] += bias[k - row_start];
      i = stop;
    }
  });
}

void CpuBackend::get_rows(const Matrix& w, const int32_t* ids, int n, DevicePtr out_ptr) {
  dequantize_rows(w, ids, n, floats(out_ptr));
}

void CpuBackend::delta_net(DevicePtr qkv, DevicePtr alpha, DevicePtr beta, const RecurrentLayer& state,
                           const DeltaNetParams& p, int n_tokens, DevicePtr out) {
  check_step(n_tokens);
  cpu_delta_net(pool_, p,
                DeltaNetStep{floats(qkv), floats(alpha), floats(beta), floats(state.conv), floats(state.ssm),
                             state.conv_seq_stride / sizeof(float), state.ssm_seq_stride / sizeof(float),
                             step_seq_ids_, step_positions_, n_tokens, floats(out)});
}

void CpuBackend::sigmoid_mul(DevicePtr x_ptr, DevicePtr gate_ptr, int64_t n) {
  float* x = floats(x_ptr);
  const float* gate = floats(gate_ptr);
  for_elements(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) x[i] *= sigmoid(gate[i]);
  });
}

void CpuBackend::split_halves(DevicePtr src_ptr, int64_t n_rows, int half, DevicePtr a_ptr, DevicePtr b_ptr) {
  const float* src = floats(src_ptr);
  float* a = floats(a_ptr);
  float* b = floats(b_ptr);
  const size_t bytes = static_cast<size_t>(half) * sizeof(float);
  for (int64_t r = 0; r < n_rows; ++r) {
    std::memcpy(a + r * half, src + r * 2 * half, bytes);
    std::memcpy(b + r * half, src + r * 2 * half + half, bytes);
  }
}

void CpuBackend::swiglu_oai(DevicePtr gate_ptr, DevicePtr up_ptr, DevicePtr out_ptr, int64_t n) {
  const float* gate = floats(gate_ptr);
  const float* up = floats(up_ptr);
  float* out = floats(out_ptr);
  for_elements(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = clamped_swiglu(gate[i], up[i]);
  });
}

}  // namespace shoal
