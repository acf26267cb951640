// The matmul tiles for float weights (F32, F16, BF16) against f32
// activations (see gemm.cpp), on every fixed-width target.
#if defined(SHOAL_TENSOR_GEMM_FLOAT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SHOAL_TENSOR_GEMM_FLOAT_INL_H_
#undef SHOAL_TENSOR_GEMM_FLOAT_INL_H_
#else
#define SHOAL_TENSOR_GEMM_FLOAT_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "tensor/gemm_common-inl.h"
#include "tensor/interleave.h"
#include "tensor/matrix.h"
#include "tensor/vec_dot_float-inl.h"

HWY_BEFORE_NAMESPACE();
namespace shoal {
namespace HWY_NAMESPACE {

// ---- Float weights (F32, F16, BF16) against f32 activations, on every
// fixed-width target. Per element one chain, acc = w * a + acc over the
// 8-lane vectors in order (a last partial vector zero-padded), then the
// lanes summed: the same arithmetic whatever tile the element lands in.
// Prefill takes tiles of three rows by four tokens (12 accumulators, 3
// weight vectors and 1 activation: AVX2's 16 registers), so each weight
// vector is loaded and widened once for four tokens and each activation
// vector once for three rows (AVX-512: FloatTilePairs below, the same
// chains two to a register). Decode takes plain rows four at a time, four
// chains to cover the multiply-add's latency, and prefetches the next four
// as it goes: four short streams at once are more than the hardware
// prefetcher follows (a prefetch past the matrix's end does not fault).
// Rows in groups of eight (tensor/interleave.h; chosen at load where it
// pays, read on every target) decode a group at a time: one stream, 8-11 %
// faster than four rows on Zen 5 (docs/benchmarks/2026-12-03-cpu-kernels.md). Either layout, the
// same chains.
#if !HWY_HAVE_SCALABLE
using DFloat = hn::CappedTag<float, 8>;

// A tile's step is a lambda (the main loop and the zero-padded tail share
// it); left to the inliner, GCC kept one-token group tiles' step out of
// line, its accumulators in memory (grouped F16 decode 35 -> 28 t/s).
#if defined(__GNUC__) || defined(__clang__)
#define SHOAL_INLINE_LAMBDA __attribute__((always_inline))
#else
#define SHOAL_INLINE_LAMBDA
#endif

// Loads an activation vector once for the R rows of a tile: left alone,
// the compiler folds the load into every multiply-add (R loads of it), and
// the tile then waits on the load ports rather than on the FMAs.
template <class V>
HWY_INLINE void InRegister(V& v) {
#if HWY_ARCH_X86 && HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR && (defined(__GNUC__) || defined(__clang__))
  asm("" : "+x"(v.raw));
#else
  (void)v;
#endif
}

// Where a matrix's float rows lie: plain (row r at r * stride, its runs
// back to back) or, before the plain tail, in groups of eight
// (tensor/interleave.h: run c of the group's row k at 8 c + k runs). The
// tiles take it as their first template argument.
template <class WeightsT, bool kGroupedRows>
struct FloatRowsAt {
  using Weights = WeightsT;
  static constexpr bool kGrouped = kGroupedRows;
  static constexpr size_t kRunBytes = kFloatRun * Weights::kBytes;
  // Bytes from one run of a row to its next.
  static constexpr size_t kRunStride = kGrouped ? 8 * kRunBytes : kRunBytes;
  const uint8_t* data;
  size_t stride;  // bytes per row
  const uint8_t* row(int64_t r) const {
    if constexpr (kGrouped) return data + static_cast<size_t>(r / 8) * 8 * stride + static_cast<size_t>(r % 8) * kRunBytes;
    else return data + static_cast<size_t>(r) * stride;
  }
  // Where value i (a whole vector's first) lies from its row's start.
  static constexpr size_t offset(size_t i) { return i / kFloatRun * kRunStride + i % kFloatRun * Weights::kBytes; }
};

template <class At, int R, int T>
HWY_INLINE void FloatTile(const uint8_t* const (&rows)[R], const float* const (&acts)[T], size_t n, float* y,
                          int64_t y_stride, const uint8_t* ahead) {
  using Weights = typename At::Weights;
  const DFloat d;
  const size_t N = hn::Lanes(d);
  using V = hn::Vec<DFloat>;
  V acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = hn::Zero(d);
  auto step = [&](auto load_w, auto load_a) SHOAL_INLINE_LAMBDA {
    V w[R];
    for (int r = 0; r < R; ++r) w[r] = load_w(r);
    for (int t = 0; t < T; ++t) {
      V a = load_a(t);
      InRegister(a);
      for (int r = 0; r < R; ++r) acc[r][t] = hn::MulAdd(w[r], a, acc[r][t]);
    }
  };
  size_t i = 0;
  for (; i + N <= n; i += N) {
    if (ahead) PrefetchSpan(ahead + i * R * Weights::kBytes, R * N * Weights::kBytes);  // as much as this step reads
    const size_t at = At::offset(i);
    step([&](int r) { return Weights{rows[r] + at}.Load(d, 0); }, [&](int t) { return hn::LoadU(d, acts[t] + i); });
  }
  if (i < n) {  // plain rows only: grouped ones are whole runs
    const size_t m = n - i;
    HWY_ALIGN uint8_t w_tail[R][8 * Weights::kBytes] = {};
    HWY_ALIGN float a_tail[T][8] = {};
    for (int r = 0; r < R; ++r) std::memcpy(w_tail[r], rows[r] + i * Weights::kBytes, m * Weights::kBytes);
    for (int t = 0; t < T; ++t) std::memcpy(a_tail[t], acts[t] + i, m * sizeof(float));
    step([&](int r) { return Weights{w_tail[r]}.Load(d, 0); }, [&](int t) { return hn::LoadU(d, a_tail[t]); });
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) y[t * y_stride + r] = hn::GetLane(hn::SumOfLanes(d, acc[r][t]));
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// AVX-512: the same 8-lane chains, two to a 512-bit register. A register
// holds rows r and r + 1 of one token, so each 8-lane half does exactly
// FloatTile's arithmetic (same products, same order, same lane sum) while
// an instruction does twice the work: the same bits as AVX2, at up to twice
// the multiply-adds per cycle where the core has 512-bit units (Zen 5,
// Xeon). A weight pair is converted once for T tokens; a token's 8
// activations are loaded into both halves (a plain broadcast load).
// Sixteen 16-bit weights widened to floats.
HWY_INLINE __m512 Widen(F16Weights, __m256i halves) { return _mm512_maskz_cvtph_ps(kLanes16, halves); }
HWY_INLINE __m512 Widen(BF16Weights, __m256i halves) {  // bf16 is the top half of an f32
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kLanes16, _mm512_maskz_cvtepu16_epi32(kLanes16, halves), 16));
}
// A run of rows r and r + 1 each (plain rows: two loads).
HWY_INLINE __m512 LoadRowPair(F32Weights a, F32Weights b) {
  return Join8(_mm256_loadu_ps(reinterpret_cast<const float*>(a.p)), _mm256_loadu_ps(reinterpret_cast<const float*>(b.p)));
}
template <class Weights>
HWY_INLINE __m512 LoadRowPair(Weights a, Weights b) {
  return Widen(a, _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.p))),
                                          _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.p)), 1));
}
// The same where row r + 1's run follows row r's (rows in groups of
// eight): one load.
HWY_INLINE __m512 LoadRunPair(F32Weights ab) { return _mm512_loadu_ps(ab.p); }
template <class Weights>
HWY_INLINE __m512 LoadRunPair(Weights ab) {
  return Widen(ab, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab.p)));
}

// Grouped rows (At::kGrouped) come a group of eight at a time, each pair's
// runs side by side.
template <class At, int P, int T>
HWY_INLINE void FloatTilePairs(const uint8_t* const (&rows)[2 * P], const float* const (&acts)[T], size_t n, float* y,
                               int64_t y_stride, const uint8_t* ahead) {
  using Weights = typename At::Weights;
  __m512 acc[P][T];
  for (int p = 0; p < P; ++p)
    for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
  auto step = [&](auto load_w, auto load_a) SHOAL_INLINE_LAMBDA {
    __m512 w[P];
    for (int p = 0; p < P; ++p) w[p] = load_w(p);
    for (int t = 0; t < T; ++t) {
      __m512 a = load_a(t);
      asm("" : "+v"(a));  // one load per token (see InRegister)
      for (int p = 0; p < P; ++p) acc[p][t] = _mm512_fmadd_ps(w[p], a, acc[p][t]);
    }
  };
  auto load_a = [](const float* a) { return Twice(_mm256_loadu_ps(a)); };
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if (ahead) PrefetchSpan(ahead + i * 2 * P * Weights::kBytes, 2 * P * 8 * Weights::kBytes);
    const size_t at = At::offset(i);
    step(
        [&](int p) {
          if constexpr (At::kGrouped) return LoadRunPair(Weights{rows[2 * p] + at});
          else return LoadRowPair(Weights{rows[2 * p] + at}, Weights{rows[2 * p + 1] + at});
        },
        [&](int t) { return load_a(acts[t] + i); });
  }
  if (i < n) {  // FloatTile's zero-padded last vector (plain rows only)
    const size_t m = n - i;
    HWY_ALIGN uint8_t w_tail[2 * P][8 * Weights::kBytes] = {};
    HWY_ALIGN float a_tail[T][8] = {};
    for (int r = 0; r < 2 * P; ++r) std::memcpy(w_tail[r], rows[r] + i * Weights::kBytes, m * Weights::kBytes);
    for (int t = 0; t < T; ++t) std::memcpy(a_tail[t], acts[t] + i, m * sizeof(float));
    step([&](int p) { return LoadRowPair(Weights{w_tail[2 * p]}, Weights{w_tail[2 * p + 1]}); },
         [&](int t) { return load_a(a_tail[t]); });
  }
  const DFloat d;
  using V = hn::Vec<DFloat>;
  for (int p = 0; p < P; ++p)
    for (int t = 0; t < T; ++t) {
      y[t * y_stride + 2 * p] = hn::GetLane(hn::SumOfLanes(d, V{Half8(acc[p][t], 0)}));
      y[t * y_stride + 2 * p + 1] = hn::GetLane(hn::SumOfLanes(d, V{Half8(acc[p][t], 1)}));
    }
}

// Prefill over rows [r0, r1), a multiple of eight: tiles of eight rows (four
// pairs) by six tokens, 24 accumulators of the 32 registers.
template <class Weights, bool kGrouped>
void FloatRowsPaired(FloatRowsAt<Weights, kGrouped> at, size_t n, int64_t r0, int64_t r1, const uint8_t* act,
                     size_t act_row_bytes, int n_tokens, float* y, int64_t y_stride) {
  constexpr int kPairs = 4, kTokens = 6;
  constexpr int64_t kRowGroup = 3 * 2 * kPairs;  // rows that stay in cache while the token tiles pass
  for (int64_t g0 = r0; g0 < r1; g0 += kRowGroup) {
    const int64_t g1 = std::min(r1, g0 + kRowGroup);
    for (int t0 = 0; t0 < n_tokens; t0 += kTokens)
      WithCount<kTokens>(std::min(kTokens, n_tokens - t0), [&](auto tokens_c) {
        constexpr int T = decltype(tokens_c)::value;
        const float* acts[T];
        for (int k = 0; k < T; ++k) acts[k] = reinterpret_cast<const float*>(act + (t0 + k) * act_row_bytes);
        for (int64_t r = g0; r < g1; r += 2 * kPairs) {
          const uint8_t* rows[2 * kPairs];
          for (int k = 0; k < 2 * kPairs; ++k) rows[k] = at.row(r + k);
          // The first pass over a group fetches the next group into cache.
          const int64_t next = r + kRowGroup;
          FloatTilePairs<decltype(at), kPairs, T>(rows, acts, n, y + t0 * y_stride + r, y_stride,
                                                  t0 == 0 && next < r1 ? at.row(next) : nullptr);
        }
      });
  }
}
#endif  // AVX-512

// Rows [r0, r1) of one layout.
template <class Weights, bool kGrouped>
void FloatRowsOf(FloatRowsAt<Weights, kGrouped> at, size_t n, int64_t r0, int64_t r1, const uint8_t* act,
                 size_t act_row_bytes, int n_tokens, float* y, int64_t y_stride) {
  constexpr int kRows = 3, kTokens = 4, kDecodeRows = 4;
  constexpr int64_t kRowGroup = 8 * kRows;  // rows that stay in cache while the token tiles pass
  // The tile of rows r.. and tokens t0.., both counts at most four,
  // prefetching from `ahead` (or not: nullptr) as it goes.
  auto tile = [&](int n_rows, int n_tile_tokens, int64_t r, int t0, const uint8_t* ahead) {
    WithCount(n_rows, [&](auto rows_c) {
      WithCount(n_tile_tokens, [&](auto tokens_c) {
        constexpr int R = decltype(rows_c)::value, T = decltype(tokens_c)::value;
        const uint8_t* rows[R];
        const float* acts[T];
        for (int k = 0; k < R; ++k) rows[k] = at.row(r + k);
        for (int k = 0; k < T; ++k) acts[k] = reinterpret_cast<const float*>(act + (t0 + k) * act_row_bytes);
        FloatTile<decltype(at), R, T>(rows, acts, n, y + t0 * y_stride + r, y_stride, ahead);
      });
    });
  };
  if (n_tokens == 1) {
    if constexpr (kGrouped) {
      // A group at a time: one stream of memory, fetched kGroupAhead past
      // where each step reads.
      const float* acts[1] = {reinterpret_cast<const float*>(act)};
      for (int64_t r = r0; r < r1; r += 8) {
        const uint8_t* rows[8];
        for (int k = 0; k < 8; ++k) rows[k] = at.row(r + k);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
        FloatTilePairs<decltype(at), 4, 1>(rows, acts, n, y + r, y_stride, rows[0] + kGroupAhead);
#else
        FloatTile<decltype(at), 8, 1>(rows, acts, n, y + r, y_stride, rows[0] + kGroupAhead);
#endif
      }
    } else {
      // Four rows at a time, prefetching the next four.
      for (int64_t r = r0; r < r1; r += kDecodeRows) {
        const int64_t next = r + kDecodeRows;
        tile(static_cast<int>(std::min<int64_t>(kDecodeRows, r1 - r)), 1, r, 0, next < r1 ? at.row(next) : nullptr);
      }
    }
    return;
  }
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  const int64_t paired_end = r0 + (r1 - r0) / 8 * 8;
  FloatRowsPaired<Weights, kGrouped>(at, n, r0, paired_end, act, act_row_bytes, n_tokens, y, y_stride);
  r0 = paired_end;  // the last rows, fewer than eight, as below
#endif
  for (int64_t g0 = r0; g0 < r1; g0 += kRowGroup) {
    const int64_t g1 = std::min(r1, g0 + kRowGroup);
    for (int t0 = 0; t0 < n_tokens; t0 += kTokens)
      for (int64_t r = g0; r < g1; r += kRows) {
        // The first pass over a group fetches the next group into cache.
        const int64_t next = r + kRowGroup;
        tile(static_cast<int>(std::min<int64_t>(kRows, g1 - r)), std::min(kTokens, n_tokens - t0), r, t0,
             t0 == 0 && next < r1 ? at.row(next) : nullptr);
      }
  }
}

template <class Weights>
void FloatRows(const Matrix& w, int64_t r0, int64_t r1, const uint8_t* act, size_t act_row_bytes, int n_tokens,
               float* y, int64_t y_stride) {
  const size_t n = static_cast<size_t>(w.cols), stride = w.row_stride();
  const int64_t grouped_end = std::clamp<int64_t>(w.interleaved ? w.rows / 8 * 8 : 0, r0, r1);
  if (r0 < grouped_end)
    FloatRowsOf(FloatRowsAt<Weights, true>{w.data, stride}, n, r0, grouped_end, act, act_row_bytes, n_tokens, y,
                y_stride);
  if (grouped_end < r1)
    FloatRowsOf(FloatRowsAt<Weights, false>{w.data, stride}, n, grouped_end, r1, act, act_row_bytes, n_tokens, y,
                y_stride);
}
#endif  // fixed-width vectors

}  // namespace HWY_NAMESPACE
}  // namespace shoal
HWY_AFTER_NAMESPACE();

#endif  // include guard
