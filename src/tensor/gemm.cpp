// gemm_rows (see gemm.h). The tile kernels are x86 code inside Highway's
// per-target compilation: the AVX2 target and the AVX-512 targets (which
// include AVX2) build them; every other target reports "not handled" and
// the caller falls back to vec_dot per element.
//
// Integer products: vpmaddubsw multiplies unsigned weight bytes with signed
// activation bytes and adds pairs into int16 (no saturation here: weights
// are at most 128 in magnitude, activations at most 127, so a pair is at
// most 32512); vpmaddwd then adds pairs into int32, times 1 or a sub-block
// scale, exactly. Q8_0 weights (signed) use |w| and the activation with w's
// sign; the others are stored unsigned and their offset comes off through
// the activation's block sum. Each output element is one float chain over
// the blocks (see "Chain kernels" in gemm_chain-inl.h), whatever the layout
// or the tile.
//
// This file runs a matrix's rows through the kernels (ChainRows) and picks
// them per type; the kernels are in gemm_chain-inl.h (building blocks and
// the 32-value types), gemm_kquant-inl.h (the K-quants) and
// gemm_float-inl.h (float weights), their shared pieces in
// gemm_common-inl.h.
//
// This translation unit must stay free of system and network headers that
// define short macros (Highway's headers break on <termios.h>'s B0).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tensor/gemm.cpp"
#include <algorithm>
#include <type_traits>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "tensor/dtype.h"
#include "tensor/gemm_chain-inl.h"
#include "tensor/gemm_common-inl.h"
#include "tensor/gemm_float-inl.h"
#include "tensor/gemm_kquant-inl.h"
#include "tensor/interleave.h"
#include "tensor/matrix.h"

HWY_BEFORE_NAMESPACE();
namespace shoal {
namespace HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2  // (re-evaluated per target: not a #define)

// [sum of v[0]'s lanes, ..., sum of v[7]'s lanes], exactly.
HWY_INLINE __m256i SumLanes8(const __m256i (&v)[8]) {
  const __m256i a01 = _mm256_hadd_epi32(v[0], v[1]), a23 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i a45 = _mm256_hadd_epi32(v[4], v[5]), a67 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i b03 = _mm256_hadd_epi32(a01, a23), b47 = _mm256_hadd_epi32(a45, a67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(b03, b47, 0x20), _mm256_permute2x128_si256(b03, b47, 0x31));
}

// One plain row against NT tokens, block b: the chain step in lane 0.
template <class Kernel, int NT>
HWY_INLINE void PlainRow(const uint8_t* row, int64_t b, const Tile<NT>& t, __m128 (&acc)[NT]) {
  const auto& x = reinterpret_cast<const typename Kernel::Plain*>(row)[b];
  const float dw = Kernel::RowScale(x);
  for (int k = 0; k < NT; ++k) {
    const auto& a = reinterpret_cast<const typename Kernel::Act*>(t.act[k])[b];
    int32_t isum = SumLanes(Kernel::Lanes(x, a));
    if constexpr (Kernel::kOffset != 0) isum -= Kernel::kOffset * t.sums[k][b];
    const float da = t.scales[k][b];
    acc[k] = ChainStep(acc[k], isum, dw * da);
    if constexpr (Kernel::kKMin)
      acc[k] = _mm_fnmadd_ss(_mm_cvtsi32_ss(_mm_setzero_ps(), Kernel::MinSum(x, a)), _mm_set_ss(F16ToF32(x.dmin) * da),
                             acc[k]);
    if constexpr (Kernel::kMin)
      acc[k] = _mm_fmadd_ss(_mm_set_ss(F16ToF32(x.m)), _mm_set_ss(da * static_cast<float>(t.sums[k][b])), acc[k]);
  }
}

// Eight plain rows against NT tokens, block b: the chain step with lane = row,
// as in the x8 layout (the same bits), the block sums reduced together.
template <class Kernel, int NT>
HWY_INLINE void PlainEight(const uint8_t* const (&rows)[8], int64_t b, const Tile<NT>& t, __m256 (&acc)[NT]) {
  using Plain = typename Kernel::Plain;
  float dw[8], mw[8];
  for (int r = 0; r < 8; ++r) {
    const Plain& x = reinterpret_cast<const Plain*>(rows[r])[b];
    dw[r] = Kernel::RowScale(x);
    if constexpr (Kernel::kMin) mw[r] = F16ToF32(x.m);
    if constexpr (Kernel::kKMin) mw[r] = F16ToF32(x.dmin);
  }
  const __m256 vdw = _mm256_loadu_ps(dw);
  for (int k = 0; k < NT; ++k) {
    const auto& a = reinterpret_cast<const typename Kernel::Act*>(t.act[k])[b];
    __m256i lanes[8];
    for (int r = 0; r < 8; ++r) lanes[r] = Kernel::Lanes(reinterpret_cast<const Plain*>(rows[r])[b], a);
    __m256i isum = SumLanes8(lanes);
    if constexpr (Kernel::kOffset != 0) isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(Kernel::kOffset * t.sums[k][b]));
    const float da = t.scales[k][b];
    acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(vdw, _mm256_set1_ps(da)), acc[k]);
    if constexpr (Kernel::kKMin) {
      int32_t msum[8];
      for (int r = 0; r < 8; ++r) msum[r] = Kernel::MinSum(reinterpret_cast<const Plain*>(rows[r])[b], a);
      acc[k] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(msum))),
                                _mm256_mul_ps(_mm256_loadu_ps(mw), _mm256_set1_ps(da)), acc[k]);
    }
    if constexpr (Kernel::kMin)
      acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(mw), _mm256_set1_ps(da * static_cast<float>(t.sums[k][b])), acc[k]);
  }
}

template <class Kernel>
void ChainRows(const Matrix& w, int64_t r0, int64_t r1, const uint8_t* act, size_t act_row_bytes, int n_tokens,
               float* y, int64_t y_stride) {
  constexpr bool kQ8_K = std::is_same_v<typename Kernel::Act, BlockQ8_K>;
  const int64_t nb = w.cols / (kQ8_K ? kQKK : kQK);
  thread_local ActivationInfo info;
  // The activation's block sums: for the offsets and min terms, and for
  // Q8_0's two-group kernel (its w + 128), which runs only for several tokens.
  const bool sums = Kernel::kOffset != 0 || Kernel::kMin || (Kernel::kTwoGroups && n_tokens > 1);
  info.fill(kQ8_K ? DType::Q8_K : DType::Q8_0, sums, act, act_row_bytes, n_tokens, nb);
  // Groups of eight rows (x8 layout): all token tiles pass a group while it is in cache.
  const int64_t grouped = w.interleaved ? w.rows / 8 * 8 : 0;
  // fn(tile, t0) for every tile of up to kTileTokens tokens.
  auto ForTiles = [&](auto&& fn) {
    for (int t0 = 0; t0 < n_tokens; t0 += kTileTokens)
      WithCount(std::min(kTileTokens, n_tokens - t0), [&](auto tokens) {
        fn(MakeTile<decltype(tokens)::value>(act, act_row_bytes, info, t0, nb), t0);
      });
  };
  // Eight rows from r: acc (lane = row) over the blocks by block(tile, acc, b), then stored.
  auto EightRows = [&](int64_t r, auto&& block) {
    ForTiles([&](const auto& t, int t0) {
      constexpr int NT = std::remove_cvref_t<decltype(t)>::kTokens;
      __m256 acc[NT];
      for (int k = 0; k < NT; ++k) acc[k] = _mm256_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) block(t, acc, b, t0 == 0);
      for (int k = 0; k < NT; ++k) _mm256_storeu_ps(y + (t0 + k) * y_stride + r, acc[k]);
    });
  };
  int64_t r = r0;
  for (; r < std::min(r1, grouped); r += 8) {
    const auto* group = reinterpret_cast<const typename Kernel::X8*>(w.data + r * w.row_stride());
#if HWY_TARGET == HWY_AVX3_DL
    // Prefill with VNNI: this group and the next in one register (decode
    // and an odd last group as below).
    if constexpr (Kernel::kTwoGroups) {
      if (n_tokens > 1 && r + 16 <= std::min(r1, grouped)) {
        // The pair's two streams (one group apart) are fetched as one: two
        // blocks a step, far enough ahead that the second group's first
        // blocks arrive before the pair starts on them.
        const size_t block_bytes = sizeof(group[0]);
        const size_t ahead = std::max<size_t>(2 * kGroupAhead, nb * block_bytes + kGroupAhead);
        ForTiles([&](const auto& t, int t0) {
          constexpr int NT = std::remove_cvref_t<decltype(t)>::kTokens;
          __m512 acc[NT];
          for (int k = 0; k < NT; ++k) acc[k] = _mm512_setzero_ps();
          for (int64_t b = 0; b < nb; ++b) {
            if (t0 == 0) PrefetchSpan(reinterpret_cast<const uint8_t*>(group) + 2 * b * block_bytes + ahead, 2 * block_bytes);
            Kernel::TwoGroups(group[b], group[nb + b], b, t, acc);
          }
          for (int k = 0; k < NT; ++k) {
            _mm256_storeu_ps(y + (t0 + k) * y_stride + r, Half8(acc[k], 0));
            _mm256_storeu_ps(y + (t0 + k) * y_stride + r + 8, Half8(acc[k], 1));
          }
        });
        r += 8;  // and the loop's 8: two groups
        continue;
      }
    }
#endif
    EightRows(r, [&](const auto& t, auto& acc, int64_t b, bool first_pass) {
      if (first_pass) PrefetchSpan(reinterpret_cast<const uint8_t*>(group + b) + kGroupAhead, sizeof(group[b]));
      Kernel::Group(group[b], b, t, acc);
    });
  }
  // Plain rows: for a tile of tokens eight at a time (lane = row, as above);
  // one token (decode) streams row after row, which memory serves faster.
  for (; n_tokens > 1 && r + 8 <= r1; r += 8) {
    const uint8_t* rows[8];
    for (int k = 0; k < 8; ++k) rows[k] = w.row(r + k);
    EightRows(r, [&](const auto& t, auto& acc, int64_t b, bool) { PlainEight<Kernel>(rows, b, t, acc); });
  }
  for (; r < r1; ++r) {
    const uint8_t* row = w.row(r);
    ForTiles([&](const auto& t, int t0) {
      constexpr int NT = std::remove_cvref_t<decltype(t)>::kTokens;
      __m128 acc[NT];
      for (int k = 0; k < NT; ++k) acc[k] = _mm_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) PlainRow<Kernel>(row, b, t, acc);
      for (int k = 0; k < NT; ++k) y[(t0 + k) * y_stride + r] = _mm_cvtss_f32(acc[k]);
    });
  }
}
#endif  // x86 AVX2 and up

// Quantized groups: the x86 tiles read them from AVX2 up. Float groups:
// every fixed-width target reads them, but the layout is chosen only where
// it was measured to pay (one stream instead of four for decode: Zen 5 +8 %
// F16 decode, docs/benchmarks/2026-12-03-cpu-kernels.md).
bool GroupsSupported(DType type) {
  const bool is_float = type == DType::F32 || type == DType::F16 || type == DType::BF16;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  return true;
#elif HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  return !is_float;
#else
  (void)is_float;
  return false;
#endif
}

// True if this target has tiles for the matrix's type (and computed them).
bool GemmRows(const Matrix& w, int64_t r0, int64_t r1, const uint8_t* act, size_t act_row_bytes, int n_tokens,
              float* y, int64_t y_stride) {
#if !HWY_HAVE_SCALABLE
  switch (w.type) {
    case DType::F32: FloatRows<F32Weights>(w, r0, r1, act, act_row_bytes, n_tokens, y, y_stride); return true;
    case DType::F16: FloatRows<F16Weights>(w, r0, r1, act, act_row_bytes, n_tokens, y, y_stride); return true;
    case DType::BF16: FloatRows<BF16Weights>(w, r0, r1, act, act_row_bytes, n_tokens, y, y_stride); return true;
    default: break;
  }
#endif
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  switch (w.type) {
    case DType::Q4_0: ChainRows<Q4_0Chain>(w, r0, r1, act, act_row_bytes, n_tokens, y, y_stride); return true;
    case DType::MXFP4: ChainRows<Mxfp4Chain>(w, r0, r1, act, act_row_bytes, n_tokens, y, y_stride); return true;
    case DType::Q4_1: ChainRows<Q4_1Chain>(w, r0, r1, act, act_row_bytes, n_tokens, y, y_stride); return true;
    case DType::Q5_0: ChainRows<Q5_0Chain>(w, r0, r1, act, act_row_bytes, n_tokens, y, y_stride); return true;
    case DType::Q5_1: ChainRows<Q5_1Chain>(w, r0, r1, act, act_row_bytes, n_tokens, y, y_stride); return true;
    case DType::Q8_0: ChainRows<Q8_0Chain>(w, r0, r1, act, act_row_bytes, n_tokens, y, y_stride); return true;
    case DType::Q2_K: ChainRows<Q2_KChain>(w, r0, r1, act, act_row_bytes, n_tokens, y, y_stride); return true;
    case DType::Q3_K: ChainRows<Q3_KChain>(w, r0, r1, act, act_row_bytes, n_tokens, y, y_stride); return true;
    case DType::Q4_K: ChainRows<Q4_KChain>(w, r0, r1, act, act_row_bytes, n_tokens, y, y_stride); return true;
    case DType::Q5_K: ChainRows<Q5_KChain>(w, r0, r1, act, act_row_bytes, n_tokens, y, y_stride); return true;
    case DType::Q6_K: ChainRows<Q6_KChain>(w, r0, r1, act, act_row_bytes, n_tokens, y, y_stride); return true;
    default: break;
  }
#endif
  return false;
}

}  // namespace HWY_NAMESPACE
}  // namespace shoal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "tensor/simd_targets.h"
#include "tensor/gemm.h"
#include "tensor/vec_dot.h"
#include "util/error.h"

namespace shoal {

// Before this file's first dispatch: see simd_targets.h.
[[maybe_unused]] static const bool kSimdTargetsChecked = drop_unusable_simd_targets();

HWY_EXPORT(GemmRows);
HWY_EXPORT(GroupsSupported);

bool gemm_reads_groups(DType type) { return HWY_DYNAMIC_DISPATCH(GroupsSupported)(type); }

void gemm_rows(const Matrix& w, int64_t r0, int64_t r1, const uint8_t* act, size_t act_row_bytes, int n_tokens,
               float* y, int64_t y_stride) {
  if (w.interleaved && (r0 % 8 != 0 || (r1 % 8 != 0 && r1 != w.rows)))
    fail("internal: rows {}..{} split a group of eight", r0, r1);
  if (HWY_DYNAMIC_DISPATCH(GemmRows)(w, r0, r1, act, act_row_bytes, n_tokens, y, y_stride)) return;
  if (w.interleaved) fail("internal: {} weights in groups of eight on a CPU without AVX2", dtype_info(w.type).name);
  for (int64_t r = r0; r < r1; ++r)
    for (int t = 0; t < n_tokens; ++t) y[t * y_stride + r] = vec_dot(w.type, w.row(r), act + t * act_row_bytes, w.cols);
}

}  // namespace shoal
#endif  // HWY_ONCE
