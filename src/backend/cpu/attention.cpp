// The CPU attention kernel (see attention.h). Per query token and KV head,
// the `group` query heads that share the KV head are handled together: each
// K row is fetched once and dotted with every head of the group, and the V
// rows are summed in tiles of two heads by four vectors, each V vector
// loaded once per tile.
//
// Vectors are capped at 8 float lanes, as in the dot kernels, so AVX2 and
// AVX-512 machines compute the same bits. No scalar float arithmetic that a
// compiler could contract differently per target: exp of scalars is libm's,
// everything else is vector code.
//
// This translation unit must stay free of system and network headers that
// define short macros (Highway's headers break on <termios.h>'s B0).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/attention.cpp"
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "backend/backend.h"
#include "backend/cpu/attention.h"
#include "tensor/blocks.h"
#include "tensor/vec_dot_common-inl.h"
#include "tensor/vec_dot_float-inl.h"
#include "tensor/vec_dot_q32-inl.h"

#ifndef SHOAL_BACKEND_CPU_ATTENTION_ARGS_
#define SHOAL_BACKEND_CPU_ATTENTION_ARGS_
namespace shoal {
// Everything a kernel call needs; items are (token, KV head) pairs,
// item = t * n_head_kv + kv_head.
struct AttentionArgs {
  const float* q;
  const uint8_t* q8;  // q in Q8_0 per row, when K is Q8_0
  size_t q8_row_bytes;
  KvLayerView kv;
  const int32_t* seq_ids;
  const int32_t* positions;
  AttentionShape shape;
  float* out;
  float* partials;                // split mode: [chunk] of part_floats(shape) each
  const int64_t* chunk_offsets;   // split mode: first chunk of each item; [n_items + 1]
};

// A head's accumulator is padded to whole 8-lane vectors (head sizes need not be).
inline int padded_dim(int d) { return (d + 7) / 8 * 8; }
inline size_t part_floats(const AttentionShape& s) {
  return static_cast<size_t>(s.n_head / s.n_head_kv) * (2 + padded_dim(s.v_dim()));
}

// The first position query t sees.
inline int first_visible(const AttentionShape& s, int pos) { return s.window > 0 ? std::max(0, pos - s.window + 1) : 0; }
inline int chunks_of(const AttentionShape& s, int pos) {
  return (pos + 1 - first_visible(s, pos) + kAttentionChunk - 1) / kAttentionChunk;
}
}  // namespace shoal
#endif

HWY_BEFORE_NAMESPACE();
namespace shoal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DA = hn::CappedTag<float, 8>;
using VA = hn::Vec<DA>;

// One value of a KV row, exactly as the vector loads convert it.
HWY_INLINE float KvValue(DType type, const uint8_t* row, int i) {
  switch (type) {
    case DType::F32: return reinterpret_cast<const float*>(row)[i];
    case DType::F16: return F16ToF32(reinterpret_cast<const uint16_t*>(row)[i]);
    default: {
      const BlockQ8_0& b = reinterpret_cast<const BlockQ8_0*>(row)[i / kQK];
      return static_cast<float>(b.qs[i % kQK]) * F16ToF32(b.d);
    }
  }
}

// Lanes(DA) values of a V head slice from element i, all inside the slice.
template <DType VT>
HWY_INLINE VA LoadWholeV(const uint8_t* v, int i) {
  const DA da;
  if constexpr (VT == DType::F32) {
    return hn::LoadU(da, reinterpret_cast<const float*>(v) + i);
  } else if constexpr (VT == DType::F16) {
    const hn::Rebind<hwy::float16_t, DA> dh;
    return hn::PromoteTo(da, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(v) + i));
  } else {
    const BlockQ8_0& b = reinterpret_cast<const BlockQ8_0*>(v)[i / kQK];
    const hn::Rebind<int32_t, DA> di;
    const hn::Rebind<int8_t, DA> d8;
    const VA q = hn::ConvertTo(da, hn::PromoteTo(di, hn::LoadU(d8, b.qs + i % kQK)));
    return hn::Mul(q, hn::Set(da, F16ToF32(b.d)));
  }
}

// The same for a slice of d values; lanes past d are zero (odd head sizes).
template <DType VT, bool kWholeVectors>
HWY_INLINE VA LoadV(const uint8_t* v, int i, int d) {
  const DA da;
  if (!kWholeVectors && i + static_cast<int>(hn::Lanes(da)) > d) {
    HWY_ALIGN float tail[8] = {};
    for (int j = i; j < d; ++j) tail[j - i] = KvValue(VT, v, j);
    return hn::Load(da, tail);
  }
  return LoadWholeV<VT>(v, i);
}

// part[g].acc = sum over the chunk's positions j of p[g][j] * v_j for NH
// heads from g0 and NV vectors from element i0 (nv of them real unless
// kFull), all NH * NV sums in registers: each V vector is loaded once for
// the NH heads, and the independent sums keep the multiply-adds' latency
// covered. Every element's sum runs over j in order, whatever the tile.
template <DType VT, bool kWholeVectors, int NH, int NV, bool kFull>
HWY_INLINE void AccumulateTile(const AttentionArgs& a, int seq, int kh, int p0, int n, int g0, int i0, int nv,
                               const float (*HWY_RESTRICT scores)[kAttentionChunk], float* HWY_RESTRICT part) {
  const DA da;
  const int N = static_cast<int>(hn::Lanes(da));
  const int d = a.shape.v_dim();
  const size_t stride = 2 + static_cast<size_t>(padded_dim(d)), v_head_bytes = row_bytes(VT, d);
  VA acc[NH][NV];
  for (int h = 0; h < NH; ++h)
    for (int k = 0; k < NV; ++k) acc[h][k] = hn::Zero(da);
  for (int j = 0; j < n; ++j) {
    const uint8_t* v = a.kv.v_row(seq, p0 + j) + kh * v_head_bytes;
    VA x[NV];
    for (int k = 0; k < NV; ++k)
      if (kFull || k < nv) x[k] = LoadV<VT, kWholeVectors>(v, i0 + k * N, d);
    for (int h = 0; h < NH; ++h) {
      const VA p = hn::Set(da, scores[g0 + h][j]);
      for (int k = 0; k < NV; ++k)
        if (kFull || k < nv) acc[h][k] = hn::MulAdd(p, x[k], acc[h][k]);
    }
  }
  for (int h = 0; h < NH; ++h)
    for (int k = 0; k < NV; ++k)
      if (kFull || k < nv) hn::StoreU(acc[h][k], da, part + (g0 + h) * stride + 2 + i0 + k * N);
}

template <DType VT, bool kWholeVectors, int NH, int NV>
HWY_INLINE void AccumulateTile(const AttentionArgs& a, int seq, int kh, int p0, int n, int g0, int i0, int nv,
                               const float (*HWY_RESTRICT scores)[kAttentionChunk], float* HWY_RESTRICT part) {
  if (nv == NV) return AccumulateTile<VT, kWholeVectors, NH, NV, true>(a, seq, kh, p0, n, g0, i0, nv, scores, part);
  AccumulateTile<VT, kWholeVectors, NH, NV, false>(a, seq, kh, p0, n, g0, i0, nv, scores, part);
}

// part[g].acc = sum over the chunk's positions j of p[g][j] * v_j: tiles of
// two heads by four vectors (eight sums), or one head by eight vectors
// where a KV head serves one query head.
template <DType VT, bool kWholeVectors>
HWY_INLINE void AccumulateV(const AttentionArgs& a, int seq, int kh, int p0, int n,
                            const float (*HWY_RESTRICT scores)[kAttentionChunk], float* HWY_RESTRICT part) {
  const DA da;
  const int N = static_cast<int>(hn::Lanes(da));
  const int vectors = padded_dim(a.shape.v_dim()) / N, group = a.shape.n_head / a.shape.n_head_kv;
  if (group == 1) {
    for (int k0 = 0; k0 < vectors; k0 += 8)
      AccumulateTile<VT, kWholeVectors, 1, 8>(a, seq, kh, p0, n, 0, k0 * N, std::min(8, vectors - k0), scores, part);
    return;
  }
  for (int k0 = 0; k0 < vectors; k0 += 4) {
    const int nv = std::min(4, vectors - k0);
    int g = 0;
    for (; g + 2 <= group; g += 2) AccumulateTile<VT, kWholeVectors, 2, 4>(a, seq, kh, p0, n, g, k0 * N, nv, scores, part);
    if (g < group) AccumulateTile<VT, kWholeVectors, 1, 4>(a, seq, kh, p0, n, g, k0 * N, nv, scores, part);
  }
}

template <DType VT>
HWY_INLINE void AccumulateV(const AttentionArgs& a, int seq, int kh, int p0, int n,
                            const float (*HWY_RESTRICT scores)[kAttentionChunk], float* HWY_RESTRICT part) {
  if (a.shape.v_dim() % 8 == 0) return AccumulateV<VT, true>(a, seq, kh, p0, n, scores, part);
  AccumulateV<VT, false>(a, seq, kh, p0, n, scores, part);
}

// scores[g][j] = q_g . k_j for the chunk's positions, each K row loaded once.
template <DType KT>
HWY_INLINE void ScoreK(const AttentionArgs& a, int seq, int kh, int p0, int n, const float* HWY_RESTRICT q,
                       const uint8_t* HWY_RESTRICT q8, float (*HWY_RESTRICT scores)[kAttentionChunk]) {
  const int d = a.shape.head_dim, group = a.shape.n_head / a.shape.n_head_kv;
  const size_t k_head_bytes = row_bytes(KT, d), q8_head_bytes = row_bytes(DType::Q8_0, d);
  for (int j = 0; j < n; ++j) {
    const uint8_t* k = a.kv.k_row(seq, p0 + j) + kh * k_head_bytes;
    for (int g = 0; g < group; ++g) {
      if constexpr (KT == DType::F32) {
        scores[g][j] = DotFloat(F32Weights{k}, q + g * d, static_cast<size_t>(d));
      } else if constexpr (KT == DType::F16) {
        scores[g][j] = DotFloat(F16Weights{k}, q + g * d, static_cast<size_t>(d));
      } else {
        scores[g][j] = DotQ32<Q8_0Kernel>(reinterpret_cast<const BlockQ8_0*>(k),
                                          reinterpret_cast<const BlockQ8_0*>(q8 + g * q8_head_bytes), d / kQK);
      }
    }
  }
}

// The partial softmax of positions [p0, p1) for the group of item (t, kh):
// part[g] = {max score, sum of exp(score - max), acc[d] = sum exp(...) * v}.
void ChunkPartial(const AttentionArgs& a, int t, int kh, int p0, int p1, float* HWY_RESTRICT part) {
  const DA da;
  const size_t N = hn::Lanes(da);
  const int d = a.shape.head_dim, group = a.shape.n_head / a.shape.n_head_kv, n = p1 - p0;
  const int seq = a.seq_ids[t];
  const size_t q_row = static_cast<size_t>(a.shape.n_head) * d;
  const float* q = a.q + t * q_row + static_cast<size_t>(kh) * group * d;
  const uint8_t* q8 = a.q8 ? a.q8 + t * a.q8_row_bytes + static_cast<size_t>(kh) * group * row_bytes(DType::Q8_0, d)
                           : nullptr;
  HWY_ALIGN float scores[kAttentionMaxGroup][kAttentionChunk];
  switch (a.kv.k_type) {
    case DType::F32: ScoreK<DType::F32>(a, seq, kh, p0, n, q, q8, scores); break;
    case DType::F16: ScoreK<DType::F16>(a, seq, kh, p0, n, q, q8, scores); break;
    default: ScoreK<DType::Q8_0>(a, seq, kh, p0, n, q, q8, scores); break;
  }
  const size_t stride = 2 + static_cast<size_t>(padded_dim(a.shape.v_dim()));
  const VA scale = hn::Set(da, a.shape.scale);
  for (int g = 0; g < group; ++g) {
    float* s = scores[g];
    int j = 0;
    VA vmax = hn::Set(da, -INFINITY);
    for (; j < n; j += static_cast<int>(N)) {
      const VA x = hn::Mul(hn::LoadU(da, s + j), scale);  // lanes past n are garbage: masked below
      const auto valid = hn::FirstN(da, static_cast<size_t>(n - j));
      hn::StoreU(x, da, s + j);
      vmax = hn::Max(vmax, hn::IfThenElse(valid, x, hn::Set(da, -INFINITY)));
    }
    const float m = hn::GetLane(hn::MaxOfLanes(da, vmax));
    const VA vm = hn::Set(da, m);
    VA vsum = hn::Zero(da);
    for (j = 0; j < n; j += static_cast<int>(N)) {
      const auto valid = hn::FirstN(da, static_cast<size_t>(n - j));
      const VA p = hn::IfThenElseZero(valid, hn::Exp(da, hn::Sub(hn::LoadU(da, s + j), vm)));
      hn::StoreU(p, da, s + j);
      vsum = hn::Add(vsum, p);
    }
    part[g * stride] = m;
    part[g * stride + 1] = hn::GetLane(hn::SumOfLanes(da, vsum));
  }
  switch (a.kv.v_type) {
    case DType::F32: AccumulateV<DType::F32>(a, seq, kh, p0, n, scores, part); break;
    case DType::F16: AccumulateV<DType::F16>(a, seq, kh, p0, n, scores, part); break;
    default: AccumulateV<DType::Q8_0>(a, seq, kh, p0, n, scores, part); break;
  }
}

// run = run (+) part, the online-softmax merge, for each head of a group.
HWY_INLINE void Merge(float* HWY_RESTRICT run, const float* HWY_RESTRICT part, int group, int d) {
  const DA da;
  const int dp = padded_dim(d);
  const size_t stride = 2 + static_cast<size_t>(dp);
  for (int g = 0; g < group; ++g, run += stride, part += stride) {
    const float m = std::max(run[0], part[0]);
    const float ra = std::exp(run[0] - m), pa = std::exp(part[0] - m);
    const VA vra = hn::Set(da, ra), vpa = hn::Set(da, pa);
    // The sum goes through lane 0 of a vector: no scalar multiply-add.
    const VA sum = hn::MulAdd(hn::Set(da, run[1]), vra, hn::Mul(hn::Set(da, part[1]), vpa));
    run[0] = m;
    run[1] = hn::GetLane(sum);
    for (int i = 0; i < dp; i += static_cast<int>(hn::Lanes(da))) {
      const VA r = hn::MulAdd(hn::LoadU(da, run + 2 + i), vra, hn::Mul(hn::LoadU(da, part + 2 + i), vpa));
      hn::StoreU(r, da, run + 2 + i);
    }
  }
}

// out heads of item (t, kh) = acc / sum.
HWY_INLINE void Finish(const AttentionArgs& a, int t, int kh, const float* HWY_RESTRICT run) {
  const DA da;
  const int d = a.shape.v_dim(), group = a.shape.n_head / a.shape.n_head_kv;
  const size_t stride = 2 + static_cast<size_t>(padded_dim(d));
  float* out = a.out + static_cast<size_t>(t) * a.shape.n_head * d + static_cast<size_t>(kh) * group * d;
  const float* sinks = a.shape.sinks ? a.shape.sinks->f32() + kh * group : nullptr;
  for (int g = 0; g < group; ++g, run += stride, out += d) {
    // A sink's logit joins the denominator (scaled to the running max).
    const float sum = sinks ? run[1] + std::exp(sinks[g] - run[0]) : run[1];
    const VA inv = hn::Set(da, 1.0f / sum);
    HWY_ALIGN float tail[8];
    for (int i = 0; i < d; i += static_cast<int>(hn::Lanes(da))) {
      const VA r = hn::Mul(hn::LoadU(da, run + 2 + i), inv);
      if (i + static_cast<int>(hn::Lanes(da)) <= d) {
        hn::StoreU(r, da, out + i);
      } else {
        hn::Store(r, da, tail);
        std::memcpy(out + i, tail, static_cast<size_t>(d - i) * sizeof(float));
      }
    }
  }
}

// Items [i0, i1) start to finish, chunk after chunk.
void AttendItems(const AttentionArgs& a, int64_t i0, int64_t i1) {
  // Per thread, off the stack: up to 128 heads of 512 values (latent attention).
  thread_local std::vector<float> run_buffer, part_buffer;
  run_buffer.resize(part_floats(a.shape));
  part_buffer.resize(part_floats(a.shape));
  float* HWY_RESTRICT run = run_buffer.data();
  float* HWY_RESTRICT part = part_buffer.data();
  const int group = a.shape.n_head / a.shape.n_head_kv;
  for (int64_t item = i0; item < i1; ++item) {
    const int t = static_cast<int>(item / a.shape.n_head_kv), kh = static_cast<int>(item % a.shape.n_head_kv);
    const int pos = a.positions[t], first = first_visible(a.shape, pos);
    for (int p0 = first; p0 <= pos; p0 += kAttentionChunk) {
      ChunkPartial(a, t, kh, p0, std::min(pos + 1, p0 + kAttentionChunk), p0 == first ? run : part);
      if (p0 != first) Merge(run, part, group, a.shape.v_dim());
    }
    Finish(a, t, kh, run);
  }
}

// Split mode, pass 1: chunks [c0, c1) of the flat chunk list, each to its partial.
void ChunkRange(const AttentionArgs& a, int64_t c0, int64_t c1) {
  const size_t n_part = part_floats(a.shape);
  // The item owning chunk c0: chunk_offsets is ascending.
  int64_t item = 0;
  while (a.chunk_offsets[item + 1] <= c0) ++item;
  for (int64_t c = c0; c < c1; ++c) {
    while (a.chunk_offsets[item + 1] <= c) ++item;
    const int t = static_cast<int>(item / a.shape.n_head_kv), kh = static_cast<int>(item % a.shape.n_head_kv);
    const int pos = a.positions[t];
    const int p0 = first_visible(a.shape, pos) + static_cast<int>(c - a.chunk_offsets[item]) * kAttentionChunk;
    ChunkPartial(a, t, kh, p0, std::min(pos + 1, p0 + kAttentionChunk), a.partials + c * n_part);
  }
}

// Split mode, pass 2: items [i0, i1) merge their chunks in order.
void MergeItems(const AttentionArgs& a, int64_t i0, int64_t i1) {
  thread_local std::vector<float> run_buffer;
  run_buffer.resize(part_floats(a.shape));
  float* HWY_RESTRICT run = run_buffer.data();
  const int group = a.shape.n_head / a.shape.n_head_kv;
  const size_t n_part = part_floats(a.shape);
  for (int64_t item = i0; item < i1; ++item) {
    const int64_t c0 = a.chunk_offsets[item], c1 = a.chunk_offsets[item + 1];
    std::memcpy(run, a.partials + c0 * n_part, n_part * sizeof(float));
    for (int64_t c = c0 + 1; c < c1; ++c) Merge(run, a.partials + c * n_part, group, a.shape.v_dim());
    Finish(a, static_cast<int>(item / a.shape.n_head_kv), static_cast<int>(item % a.shape.n_head_kv), run);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace shoal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "tensor/simd_targets.h"
#include "tensor/dequantize.h"
#include "tensor/quantize.h"
#include "tensor/vec_dot.h"
#include "util/error.h"

namespace shoal {

// Before this file's first dispatch: see simd_targets.h.
[[maybe_unused]] static const bool kSimdTargetsChecked = drop_unusable_simd_targets();

HWY_EXPORT(AttendItems);
HWY_EXPORT(ChunkRange);
HWY_EXPORT(MergeItems);

void cpu_attention(ThreadPool& pool, const float* q, const KvLayerView& kv, const int32_t* seq_ids,
                   const int32_t* positions, int n_tokens, const AttentionShape& shape, float* out,
                   AttentionScratch& scratch) {
  const int group = shape.n_head / shape.n_head_kv;
  if (shape.head_dim > kAttentionMaxHeadDim || shape.v_dim() > kAttentionMaxHeadDim || group > kAttentionMaxGroup ||
      (kv.v_in_k && shape.v_dim() > shape.head_dim))
    fail("attention with head size {} (values {}) and {} query heads per KV head is not supported (at most {}, {})",
         shape.head_dim, shape.v_dim(), group, kAttentionMaxHeadDim, kAttentionMaxGroup);
  AttentionArgs a{q, nullptr, 0, kv, seq_ids, positions, shape, out, nullptr, nullptr};
  if (kv.k_type == DType::Q8_0) {  // the query meets a Q8_0 key as Q8_0, as in the matmuls
    const int64_t width = static_cast<int64_t>(shape.n_head) * shape.head_dim;
    a.q8_row_bytes = row_bytes(DType::Q8_0, width);
    scratch.q8.resize(a.q8_row_bytes * n_tokens);
    for (int t = 0; t < n_tokens; ++t)
      quantize_activation(DType::Q8_0, q + t * width, scratch.q8.data() + t * a.q8_row_bytes, width);
    a.q8 = scratch.q8.data();
  }
  const int64_t n_items = static_cast<int64_t>(n_tokens) * shape.n_head_kv;
  // Enough queries to keep every thread busy: one item per task.
  if (n_items >= 4 * static_cast<int64_t>(pool.size())) {
    pool.parallel_for(n_items, 1, [&](int64_t i0, int64_t i1) { HWY_DYNAMIC_DISPATCH(AttendItems)(a, i0, i1); });
    return;
  }
  // Few queries (decode): spread their chunks over the threads, then merge.
  scratch.chunk_offsets.resize(static_cast<size_t>(n_items) + 1);
  scratch.chunk_offsets[0] = 0;
  for (int64_t item = 0; item < n_items; ++item)
    scratch.chunk_offsets[item + 1] =
        scratch.chunk_offsets[item] + chunks_of(shape, positions[item / shape.n_head_kv]);
  const int64_t n_chunks = scratch.chunk_offsets[n_items];
  scratch.partials.resize(static_cast<size_t>(n_chunks) * part_floats(shape));
  a.partials = scratch.partials.data();
  a.chunk_offsets = scratch.chunk_offsets.data();
  pool.parallel_for(n_chunks, 1, [&](int64_t c0, int64_t c1) { HWY_DYNAMIC_DISPATCH(ChunkRange)(a, c0, c1); });
  pool.parallel_for(n_items, 1, [&](int64_t i0, int64_t i1) { HWY_DYNAMIC_DISPATCH(MergeItems)(a, i0, i1); });
}

namespace {
// One value of a KV row, whatever its type.
double kv_value(DType type, const uint8_t* row, int i) {
  switch (type) {
    case DType::F32: return reinterpret_cast<const float*>(row)[i];
    case DType::F16: return f16_to_f32(reinterpret_cast<const uint16_t*>(row)[i]);
    default: {
      const BlockQ8_0& b = reinterpret_cast<const BlockQ8_0*>(row)[i / kQK];
      return static_cast<double>(half_to_float(b.d)) * b.qs[i % kQK];
    }
  }
}
}  // namespace

void cpu_attention_reference(const float* q, const KvLayerView& kv, const int32_t* seq_ids, const int32_t* positions,
                             int n_tokens, const AttentionShape& shape, float* out) {
  const int d = shape.head_dim, dv = shape.v_dim(), group = shape.n_head / shape.n_head_kv;
  std::vector<double> scores, acc(dv);
  std::vector<float> qh(d);
  std::vector<uint8_t> q8(row_bytes(DType::Q8_0, d) + 1);
  for (int t = 0; t < n_tokens; ++t) {
    const int pos = positions[t], first = first_visible(shape, pos);
    for (int h = 0; h < shape.n_head; ++h) {
      const int kh = h / group;
      std::copy_n(q + (static_cast<size_t>(t) * shape.n_head + h) * d, d, qh.begin());
      if (kv.k_type == DType::Q8_0) {  // as in the kernel, the query meets a Q8_0 key in Q8_0
        quantize_row_reference(DType::Q8_0, qh.data(), q8.data(), d);
        dequantize_row(DType::Q8_0, q8.data(), qh.data(), d);
      }
      scores.assign(pos + 1 - first, 0.0);
      double m = -INFINITY;
      for (int p = first; p <= pos; ++p) {
        const uint8_t* k = kv.k_row(seq_ids[t], p);
        double s = 0;
        for (int i = 0; i < d; ++i) s += qh[i] * kv_value(kv.k_type, k, kh * d + i);
        scores[p - first] = s * shape.scale;
        m = std::max(m, scores[p - first]);
      }
      double sum = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int p = first; p <= pos; ++p) {
        const double w = std::exp(scores[p - first] - m);
        sum += w;
        const uint8_t* v = kv.v_row(seq_ids[t], p);
        for (int i = 0; i < dv; ++i) acc[i] += w * kv_value(kv.v_type, v, kh * dv + i);
      }
      if (shape.sinks) sum += std::exp(static_cast<double>(shape.sinks->f32()[h]) - m);
      for (int i = 0; i < dv; ++i) out[(static_cast<size_t>(t) * shape.n_head + h) * dv + i] = static_cast<float>(acc[i] / sum);
    }
  }
}

}  // namespace shoal
#endif  // HWY_ONCE
