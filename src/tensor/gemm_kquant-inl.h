// The chain kernels of the K-quants (Q2_K .. Q6_K, 256-value blocks against
// Q8_K activations), on the building blocks of gemm_chain-inl.h.
#if defined(SHOAL_TENSOR_GEMM_KQUANT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SHOAL_TENSOR_GEMM_KQUANT_INL_H_
#undef SHOAL_TENSOR_GEMM_KQUANT_INL_H_
#else
#define SHOAL_TENSOR_GEMM_KQUANT_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"
#include "tensor/blocks.h"
#include "tensor/gemm_chain-inl.h"
#include "tensor/interleave.h"

HWY_BEFORE_NAMESPACE();
namespace shoal {
namespace HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2  // (re-evaluated per target: not a #define)

// Q4_K (and Q5_K, whose quants take a fifth bit from qh):
// x = d * scale_s * q - dmin * min_s per sub-block s of 32, so
//   x . a = da * (d * isum - dmin * msum)
// with isum = sum_s scale_s * (q . qa over s) and msum = sum_s min_s * (the
// activation's sum over s), both exact: acc = fma(isum, d * da, acc), then
// acc = -(msum * (dmin * da)) + acc.
template <class X8_, class Plain_, bool kFifth>
struct Q45_KChain : ChainTraits<X8_, Plain_, BlockQ8_K, 0, false, true> {
  using X8 = X8_;
  using Plain = Plain_;
  using Act = BlockQ8_K;
  static HWY_INLINE __m256i Lanes(const Plain& x, const Act& a) {
    int scale[8], min[8];
    for (int s = 0; s < 8; ++s) kquant_scale_min(x.scales, s, scale[s], min[s]);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256i isum = _mm256_setzero_si256(), qh = _mm256_setzero_si256();
    if constexpr (kFifth) qh = Load32(x.qh);
    HWY_UNROLL(4) for (int j = 0; j < 4; ++j) {  // values 64j + l (low), 64j + 32 + l (high); qh[l] bits 2j, 2j + 1
      const __m256i q = Load32(x.qs + 32 * j);
      __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if constexpr (kFifth) {
        lo = _mm256_or_si256(lo, FifthBits(qh, 2 * j));
        hi = _mm256_or_si256(hi, FifthBits(qh, 2 * j + 1));
      }
      isum = _mm256_add_epi32(isum, DotBytesScaled(lo, Load32(a.qs + 64 * j), _mm256_set1_epi16(static_cast<int16_t>(scale[2 * j]))));
      isum = _mm256_add_epi32(isum, DotBytesScaled(hi, Load32(a.qs + 64 * j + 32), _mm256_set1_epi16(static_cast<int16_t>(scale[2 * j + 1]))));
    }
    return isum;
  }
  static HWY_INLINE int32_t MinSum(const Plain& x, const Act& a) {
    int32_t m = 0;
    for (int s = 0; s < 8; ++s) {
      int scale, min;
      kquant_scale_min(x.scales, s, scale, min);
      m += min * (a.bsums[2 * s] + a.bsums[2 * s + 1]);
    }
    return m;
  }
  // The activation's sums over sub-blocks 2p and 2p + 1 as an int16 pair
  // (each at most 32 * 127), for vpmaddwd against [min_2p, min_2p+1].
  static HWY_INLINE int32_t SubBlockSumPair(const Act& a, int p) {
    const int bs0 = a.bsums[4 * p] + a.bsums[4 * p + 1], bs1 = a.bsums[4 * p + 2] + a.bsums[4 * p + 3];
    return static_cast<int32_t>((static_cast<uint32_t>(bs1) << 16) | (static_cast<uint32_t>(bs0) & 0xFFFF));
  }
  // Eight rows' scale (or min) of sub-block j as bytes, from the byte-major scales.
  static HWY_INLINE void ScalesMins(const uint8_t* t, int j, __m128i& scale, __m128i& min) {
    auto row_bytes = [&](int i) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(t + 8 * i)); };
    const __m128i low6 = _mm_set1_epi8(63), low4 = _mm_set1_epi8(0x0F), low2 = _mm_set1_epi8(0x03);
    if (j < 4) {
      scale = _mm_and_si128(row_bytes(j), low6);
      min = _mm_and_si128(row_bytes(j + 4), low6);
    } else {
      const __m128i b = row_bytes(j + 4);
      const __m128i top_s = _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(row_bytes(j - 4), 6), low2), 4);
      const __m128i top_m = _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(row_bytes(j), 6), low2), 4);
      scale = _mm_or_si128(_mm_and_si128(b, low4), top_s);
      min = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(b, 4), low4), top_m);
    }
  }
  template <int NT>
  static HWY_INLINE void Group(const X8& g, int64_t b, const Tile<NT>& t, __m256 (&acc)[NT]) {
    const __m256 d = HalvesToFloats(g.d), dmin = HalvesToFloats(g.dmin);
    __m256i scale16[8], min_pairs[4];
    __m128i mins[8];
    for (int j = 0; j < 8; ++j) {
      __m128i sc;
      ScalesMins(g.scales, j, sc, mins[j]);
      scale16[j] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(sc, sc));  // [s_r0, s_r0, s_r1, s_r1, ...]
    }
    for (int p = 0; p < 4; ++p) min_pairs[p] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mins[2 * p], mins[2 * p + 1]));
    __m256i isum[NT];
    for (int k = 0; k < NT; ++k) isum[k] = _mm256_setzero_si256();
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    // Chunks summed in int16 before widening: a lane sums 2 * kRun products
    // of at most 15 * 127 (Q4_K, 8 chunks) or 31 * 127 (Q5_K, 4 chunks).
    constexpr int kRun = kFifth ? 4 : 8;
    for (int j = 0; j < 4; ++j) {  // sub-blocks 2j (low nibbles) and 2j + 1 (high)
      for (int c0 = 0; c0 < 8; c0 += kRun) {
        __m256i plo[NT], phi[NT];
        for (int k = 0; k < NT; ++k) plo[k] = phi[k] = _mm256_setzero_si256();
        for (int c = c0; c < c0 + kRun; ++c) {
          const __m256i v = Load32(g.qs + 32 * (8 * j + c));
          __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
          if constexpr (kFifth) {  // chunk c's fifth bits: bit 2j for the low nibbles, 2j + 1 for the high
            const __m256i qh = Load32(g.qh + 32 * c);
            lo = _mm256_or_si256(lo, FifthBits(qh, 2 * j));
            hi = _mm256_or_si256(hi, FifthBits(qh, 2 * j + 1));
          }
          for (int k = 0; k < NT; ++k) {
            const int8_t* qa = reinterpret_cast<const BlockQ8_K*>(t.act[k])[b].qs + 64 * j + 4 * c;
            plo[k] = _mm256_add_epi16(plo[k], _mm256_maddubs_epi16(lo, Broadcast4(qa)));
            phi[k] = _mm256_add_epi16(phi[k], _mm256_maddubs_epi16(hi, Broadcast4(qa + 32)));
          }
        }
        for (int k = 0; k < NT; ++k)
          isum[k] = _mm256_add_epi32(isum[k], _mm256_add_epi32(_mm256_madd_epi16(plo[k], scale16[2 * j]),
                                                               _mm256_madd_epi16(phi[k], scale16[2 * j + 1])));
      }
    }
    for (int k = 0; k < NT; ++k) {
      const BlockQ8_K& a = reinterpret_cast<const BlockQ8_K*>(t.act[k])[b];
      __m256i msum = _mm256_setzero_si256();
      for (int p = 0; p < 4; ++p)
        msum = _mm256_add_epi32(msum, _mm256_madd_epi16(min_pairs[p], _mm256_set1_epi32(SubBlockSumPair(a, p))));
      const __m256 da = _mm256_set1_ps(t.scales[k][b]);
      acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[k]), _mm256_mul_ps(d, da), acc[k]);
      acc[k] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmin, da), acc[k]);
    }
  }
#if HWY_TARGET == HWY_AVX3_DL
  // Group for two groups at once, with VNNI: each sub-block's q . qa summed
  // in int32 (no int16 step, so Q5_K needs no shorter runs), then times its
  // scale (vpmulld); isum and msum are the same exact integers as Group's.
  static constexpr bool kTwoGroups = true;
  template <int NT>
  static HWY_INLINE void TwoGroups(const X8& g0, const X8& g1, int64_t b, const Tile<NT>& t, __m512 (&acc)[NT]) {
    __m128i scales[8], mins0[8], mins1[8];  // scales[j]: sixteen rows' scale of sub-block j as bytes
    for (int j = 0; j < 8; ++j) {
      __m128i sc0, sc1;
      ScalesMins(g0.scales, j, sc0, mins0[j]);
      ScalesMins(g1.scales, j, sc1, mins1[j]);
      scales[j] = _mm_unpacklo_epi64(sc0, sc1);
    }
    __m512i isum[NT];
    for (int k = 0; k < NT; ++k) isum[k] = _mm512_setzero_si512();
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int j = 0; j < 4; ++j) {  // sub-blocks 2j (low nibbles) and 2j + 1 (high)
      __m512i plo[NT], phi[NT];
      for (int k = 0; k < NT; ++k) plo[k] = phi[k] = _mm512_setzero_si512();
      for (int c = 0; c < 8; ++c) {
        const __m512i v = JoinLoad32(g0.qs + 32 * (8 * j + c), g1.qs + 32 * (8 * j + c));
        __m512i lo = _mm512_and_si512(v, low4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        if constexpr (kFifth) {
          const __m512i qh = JoinLoad32(g0.qh + 32 * c, g1.qh + 32 * c);
          lo = _mm512_or_si512(lo, FifthBits(qh, 2 * j));
          hi = _mm512_or_si512(hi, FifthBits(qh, 2 * j + 1));
        }
        for (int k = 0; k < NT; ++k) {
          const int8_t* qa = reinterpret_cast<const BlockQ8_K*>(t.act[k])[b].qs + 64 * j + 4 * c;
          plo[k] = AddDotBytes(plo[k], lo, Broadcast4x16(qa));
          phi[k] = AddDotBytes(phi[k], hi, Broadcast4x16(qa + 32));
        }
      }
      const __m512i scale_lo = _mm512_maskz_cvtepu8_epi32(kLanes16, scales[2 * j]);
      const __m512i scale_hi = _mm512_maskz_cvtepu8_epi32(kLanes16, scales[2 * j + 1]);
      for (int k = 0; k < NT; ++k)
        isum[k] = _mm512_add_epi32(isum[k], _mm512_add_epi32(_mm512_mullo_epi32(plo[k], scale_lo),
                                                             _mm512_mullo_epi32(phi[k], scale_hi)));
    }
    __m512i min_pairs[4];  // [m_2p, m_2p+1] per row as int16 pairs, the first group's rows low
    for (int p = 0; p < 4; ++p)
      min_pairs[p] = _mm512_maskz_cvtepu8_epi16(kLanes32, _mm256_set_m128i(_mm_unpacklo_epi8(mins1[2 * p], mins1[2 * p + 1]),
                                                           _mm_unpacklo_epi8(mins0[2 * p], mins0[2 * p + 1])));
    const __m512 d = Join8(HalvesToFloats(g0.d), HalvesToFloats(g1.d));
    const __m512 dmin = Join8(HalvesToFloats(g0.dmin), HalvesToFloats(g1.dmin));
    for (int k = 0; k < NT; ++k) {
      const BlockQ8_K& a = reinterpret_cast<const BlockQ8_K*>(t.act[k])[b];
      __m512i msum = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p)
        msum = _mm512_add_epi32(msum, _mm512_madd_epi16(min_pairs[p], _mm512_set1_epi32(SubBlockSumPair(a, p))));
      const __m512 da = _mm512_set1_ps(t.scales[k][b]);
      acc[k] = _mm512_fmadd_ps(ToFloats(isum[k]), _mm512_mul_ps(d, da), acc[k]);
      acc[k] = _mm512_fnmadd_ps(ToFloats(msum), _mm512_mul_ps(dmin, da), acc[k]);
    }
  }
#endif
};
using Q4_KChain = Q45_KChain<BlockQ4_Kx8, BlockQ4_K, false>;
using Q5_KChain = Q45_KChain<BlockQ5_Kx8, BlockQ5_K, true>;

// Eight rows' int8 scales of group g (scales[8g + r]: the x8 layout's
// byte-major scales) as int16 pairs [s_r0, s_r0, s_r1, s_r1, ...].
HWY_INLINE __m256i GroupScale16(const int8_t* scales, int g) {
  const __m128i s = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + 8 * g));
  return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s, s));
}
// Each of eight rows' sum over the 16 groups of scale_g * (the
// activation's sum over g), exactly, from byte-major int8 scales.
HWY_INLINE __m256i ScaledGroupSums(const int8_t* scales, const BlockQ8_K& a) {
  __m256i sum = _mm256_setzero_si256();
  for (int p = 0; p < 8; ++p) {  // groups 2p, 2p + 1: [s_r,2p, s_r,2p+1] . [bsum_2p, bsum_2p+1]
    const __m128i s0 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + 16 * p));
    const __m128i s1 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + 16 * p + 8));
    const __m256i pairs = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s0, s1));
    const uint32_t bs = (static_cast<uint32_t>(static_cast<uint16_t>(a.bsums[2 * p + 1])) << 16) |
                        static_cast<uint16_t>(a.bsums[2 * p]);
    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pairs, _mm256_set1_epi32(static_cast<int32_t>(bs))));
  }
  return sum;
}

#if HWY_TARGET == HWY_AVX3_DL
// 8 bytes at lo and 8 at hi as one 16-byte vector.
HWY_INLINE __m128i JoinLoad8(const void* lo, const void* hi) {
  return _mm_unpacklo_epi64(_mm_loadl_epi64(static_cast<const __m128i*>(lo)), _mm_loadl_epi64(static_cast<const __m128i*>(hi)));
}
// ScaledGroupSums for two groups: the first group's eight rows low.
HWY_INLINE __m512i ScaledGroupSums(const int8_t* scales0, const int8_t* scales1, const BlockQ8_K& a) {
  __m512i sum = _mm512_setzero_si512();
  for (int p = 0; p < 8; ++p) {
    const __m128i pairs0 = _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales0 + 16 * p)),
                                             _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales0 + 16 * p + 8)));
    const __m128i pairs1 = _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales1 + 16 * p)),
                                             _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales1 + 16 * p + 8)));
    const __m512i pairs = _mm512_maskz_cvtepi8_epi16(kLanes32, _mm256_set_m128i(pairs1, pairs0));
    const uint32_t bs = (static_cast<uint32_t>(static_cast<uint16_t>(a.bsums[2 * p + 1])) << 16) |
                        static_cast<uint16_t>(a.bsums[2 * p]);
    sum = _mm512_add_epi32(sum, _mm512_madd_epi16(pairs, _mm512_set1_epi32(static_cast<int32_t>(bs))));
  }
  return sum;
}
#endif

// Q2_K and Q3_K: 16 groups of 16, value 128n + 32j + l in bits 2j of
// qs[32n + l] (and Q3_K's third bit in bit 4n + j of hmask[l]).
//   Q2_K: x = d * sc_g * q - dmin * m_g with q in 0..3: as Q4_K,
//     acc = fma(isum, d * da, acc), then acc = -(msum * (dmin * da)) + acc;
//   Q3_K: x = d * sc_g * (u - 4) with u = low + 4 * high in 0..7:
//     isum = sum_g sc_g * (u . qa over g) - 4 * sum_g sc_g * (the activation's sum over g),
//     acc = fma(isum, d * da, acc);
// the integer sums exact (an int16 lane sums 8 products of at most 7 * 127).
template <class X8_, class Plain_, bool kQ3>
struct Q23_KChain : ChainTraits<X8_, Plain_, BlockQ8_K, 0, false, !kQ3> {
  using X8 = X8_;
  using Plain = Plain_;
  using Act = BlockQ8_K;
  // Quant vector (n, j) of 32 bytes q (and hmask bytes h): values 0..3, or
  // 0..7 with bit 4n + j of h moved to bit 2 (a 16-bit shift of at most 5
  // keeps it within its byte).
  static HWY_INLINE __m256i Quants(__m256i q, __m256i h, int n, int j) {
    __m256i u = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), _mm256_set1_epi8(0x03));
    if constexpr (kQ3) {
      const int v = 4 * n + j;
      const __m256i at2 = v < 2 ? _mm256_slli_epi16(h, 2 - v) : _mm256_srli_epi16(h, v - 2);
      u = _mm256_or_si256(u, _mm256_and_si256(at2, _mm256_set1_epi8(0x04)));
    }
    return u;
  }
  static HWY_INLINE int Scale(const Plain& x, int g) {
    if constexpr (kQ3) return q3k_scale(x.scales, g);
    else return x.scales[g] & 0xF;
  }
  static HWY_INLINE __m256i Lanes(const Plain& x, const Act& a) {
    int16_t scale[16];
    for (int g = 0; g < 16; ++g) scale[g] = static_cast<int16_t>(Scale(x, g));
    __m256i isum = _mm256_setzero_si256(), h = _mm256_setzero_si256();
    if constexpr (kQ3) h = Load32(x.hmask);
    HWY_UNROLL(8) for (int e = 0; e < 8; ++e) {  // values 128n + 32j .. (unrolled: constant shifts)
      const int n = e / 4, j = e % 4, g = 8 * n + 2 * j;
      const __m256i u = Quants(Load32(x.qs + 32 * n), h, n, j);
      // A 32-value vector spans two groups: the first 16 in the low half.
      const __m256i pair = _mm256_set_m128i(_mm_set1_epi16(scale[g + 1]), _mm_set1_epi16(scale[g]));
      isum = _mm256_add_epi32(isum, DotBytesScaled(u, Load32(a.qs + 128 * n + 32 * j), pair));
    }
    if constexpr (kQ3) {
      int offset = 0;
      for (int g = 0; g < 16; ++g) offset += scale[g] * a.bsums[g];
      isum = _mm256_sub_epi32(isum, _mm256_setr_epi32(4 * offset, 0, 0, 0, 0, 0, 0, 0));
    }
    return isum;
  }
  static HWY_INLINE int32_t MinSum(const Plain& x, const Act& a) {
    int32_t m = 0;
    for (int g = 0; g < 16; ++g) m += (x.scales[g] >> 4) * a.bsums[g];
    return m;
  }
  // The eight rows' 16 scales (and Q2_K's mins) as byte-major int8.
  static HWY_INLINE void Scales(const X8& g, int8_t (&scale)[128], int8_t (&min)[128]) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    if constexpr (kQ3) {  // blocks.h: low 4 bits in bytes 0..7, high 2 bits in bytes 8..11
      const __m256i a = Load32(g.scales), b = Load32(g.scales + 32), h = Load32(g.scales + 64);
      const __m256i low[4] = {_mm256_and_si256(a, low4), _mm256_and_si256(b, low4),
                              _mm256_and_si256(_mm256_srli_epi16(a, 4), low4),
                              _mm256_and_si256(_mm256_srli_epi16(b, 4), low4)};
      for (int s = 0; s < 4; ++s) {  // groups 4s .. 4s + 3
        const __m256i high = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(2 * s)), _mm256_set1_epi8(0x03));
        const __m256i v = _mm256_sub_epi8(_mm256_or_si256(low[s], _mm256_slli_epi16(high, 4)), _mm256_set1_epi8(32));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(scale + 32 * s), v);
      }
    } else {
      for (int s = 0; s < 4; ++s) {
        const __m256i v = Load32(g.scales + 32 * s);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(scale + 32 * s), _mm256_and_si256(v, low4));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(min + 32 * s), _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
      }
    }
  }
  template <int NT>
  static HWY_INLINE void Group(const X8& g, int64_t b, const Tile<NT>& t, __m256 (&acc)[NT]) {
    HWY_ALIGN int8_t scale[128], min[128];
    Scales(g, scale, min);
    __m256i isum[NT];
    for (int k = 0; k < NT; ++k) isum[k] = _mm256_setzero_si256();
    HWY_UNROLL(8) for (int e = 0; e < 8; ++e) {  // values 128n + 32j .. (unrolled: constant shifts)
      const int n = e / 4, j = e % 4;
      for (int half = 0; half < 2; ++half) {  // group 8n + 2j + half: chunks m of 4 values 4m..
        __m256i p[NT];
        for (int k = 0; k < NT; ++k) p[k] = _mm256_setzero_si256();
        for (int m = 4 * half; m < 4 * half + 4; ++m) {
          __m256i h = _mm256_setzero_si256();
          if constexpr (kQ3) h = Load32(g.hmask + 32 * m);
          const __m256i u = Quants(Load32(g.qs + 32 * (8 * n + m)), h, n, j);
          for (int k = 0; k < NT; ++k) {
            const int8_t* qa = reinterpret_cast<const BlockQ8_K*>(t.act[k])[b].qs + 128 * n + 32 * j + 4 * m;
            p[k] = _mm256_add_epi16(p[k], _mm256_maddubs_epi16(u, Broadcast4(qa)));
          }
        }
        const __m256i sc = GroupScale16(scale, 8 * n + 2 * j + half);
        for (int k = 0; k < NT; ++k) isum[k] = _mm256_add_epi32(isum[k], _mm256_madd_epi16(p[k], sc));
      }
    }
    const __m256 d = HalvesToFloats(g.d);
    __m256 dmin = _mm256_setzero_ps();
    if constexpr (!kQ3) dmin = HalvesToFloats(g.dmin);
    for (int k = 0; k < NT; ++k) {
      const BlockQ8_K& a = reinterpret_cast<const BlockQ8_K*>(t.act[k])[b];
      const __m256 da = _mm256_set1_ps(t.scales[k][b]);
      if constexpr (kQ3) {
        const __m256i exact = _mm256_sub_epi32(isum[k], _mm256_slli_epi32(ScaledGroupSums(scale, a), 2));
        acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(exact), _mm256_mul_ps(d, da), acc[k]);
      } else {
        acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[k]), _mm256_mul_ps(d, da), acc[k]);
        acc[k] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ScaledGroupSums(min, a)), _mm256_mul_ps(dmin, da), acc[k]);
      }
    }
  }
#if HWY_TARGET == HWY_AVX3_DL
  static HWY_INLINE __m512i Quants(__m512i q, __m512i h, int n, int j) {  // as above, two groups
    __m512i u = _mm512_and_si512(_mm512_srli_epi16(q, 2 * j), _mm512_set1_epi8(0x03));
    if constexpr (kQ3) {
      const int v = 4 * n + j;
      const __m512i at2 = v < 2 ? _mm512_slli_epi16(h, 2 - v) : _mm512_srli_epi16(h, v - 2);
      u = _mm512_or_si512(u, _mm512_and_si512(at2, _mm512_set1_epi8(0x04)));
    }
    return u;
  }
  // Group for two groups at once, with VNNI: each group of 16's u . qa
  // summed in int32, then times its scale (vpmulld); the same exact sums.
  static constexpr bool kTwoGroups = true;
  template <int NT>
  static HWY_INLINE void TwoGroups(const X8& g0, const X8& g1, int64_t b, const Tile<NT>& t, __m512 (&acc)[NT]) {
    HWY_ALIGN int8_t scale0[128], min0[128], scale1[128], min1[128];
    Scales(g0, scale0, min0);
    Scales(g1, scale1, min1);
    __m512i isum[NT];
    for (int k = 0; k < NT; ++k) isum[k] = _mm512_setzero_si512();
    HWY_UNROLL(8) for (int e = 0; e < 8; ++e) {  // values 128n + 32j .. (unrolled: constant shifts)
      const int n = e / 4, j = e % 4;
      for (int half = 0; half < 2; ++half) {  // group 8n + 2j + half: chunks m of 4 values 4m..
        __m512i p[NT];
        for (int k = 0; k < NT; ++k) p[k] = _mm512_setzero_si512();
        for (int m = 4 * half; m < 4 * half + 4; ++m) {
          __m512i h = _mm512_setzero_si512();
          if constexpr (kQ3) h = JoinLoad32(g0.hmask + 32 * m, g1.hmask + 32 * m);
          const __m512i u = Quants(JoinLoad32(g0.qs + 32 * (8 * n + m), g1.qs + 32 * (8 * n + m)), h, n, j);
          for (int k = 0; k < NT; ++k) {
            const int8_t* qa = reinterpret_cast<const BlockQ8_K*>(t.act[k])[b].qs + 128 * n + 32 * j + 4 * m;
            p[k] = AddDotBytes(p[k], u, Broadcast4x16(qa));
          }
        }
        const int group = 8 * n + 2 * j + half;
        const __m512i sc = _mm512_maskz_cvtepi8_epi32(kLanes16, JoinLoad8(scale0 + 8 * group, scale1 + 8 * group));
        for (int k = 0; k < NT; ++k) isum[k] = _mm512_add_epi32(isum[k], _mm512_mullo_epi32(p[k], sc));
      }
    }
    const __m512 d = Join8(HalvesToFloats(g0.d), HalvesToFloats(g1.d));
    __m512 dmin = _mm512_setzero_ps();
    if constexpr (!kQ3) dmin = Join8(HalvesToFloats(g0.dmin), HalvesToFloats(g1.dmin));
    for (int k = 0; k < NT; ++k) {
      const BlockQ8_K& a = reinterpret_cast<const BlockQ8_K*>(t.act[k])[b];
      const __m512 da = _mm512_set1_ps(t.scales[k][b]);
      if constexpr (kQ3) {
        const __m512i exact = _mm512_sub_epi32(isum[k], _mm512_maskz_slli_epi32(kLanes16, ScaledGroupSums(scale0, scale1, a), 2));
        acc[k] = _mm512_fmadd_ps(ToFloats(exact), _mm512_mul_ps(d, da), acc[k]);
      } else {
        acc[k] = _mm512_fmadd_ps(ToFloats(isum[k]), _mm512_mul_ps(d, da), acc[k]);
        acc[k] = _mm512_fnmadd_ps(ToFloats(ScaledGroupSums(min0, min1, a)), _mm512_mul_ps(dmin, da), acc[k]);
      }
    }
  }
#endif
};
using Q2_KChain = Q23_KChain<BlockQ2_Kx8, BlockQ2_K, false>;
using Q3_KChain = Q23_KChain<BlockQ3_Kx8, BlockQ3_K, true>;

// Q6_K: 16 groups of 16 with int8 scales; the stored 0..63 is q + 32:
//   isum = sum_g scale_g * (q6 . qa over g) - 32 * sum_g scale_g * (the activation's sum over g),
// exact, then acc = fma(isum, d * da, acc).
struct Q6_KChain : ChainTraits<BlockQ6_Kx8, BlockQ6_K, BlockQ8_K> {
  // The four 32-value vectors of half n of a row's block (blocks.h): values
  // 128n + l, + 32, + 64, + 96 from ql bytes v1 (l), v2 (32 + l) and qh bytes h.
  static HWY_INLINE void Unpack(__m256i v1, __m256i v2, __m256i h, __m256i (&q)[4]) {
    const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(0x03), bits45 = _mm256_set1_epi8(0x30);
    q[0] = _mm256_or_si256(_mm256_and_si256(v1, low4), _mm256_slli_epi16(_mm256_and_si256(h, low2), 4));
    q[1] = _mm256_or_si256(_mm256_and_si256(v2, low4), _mm256_and_si256(_mm256_slli_epi16(h, 2), bits45));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v1, 4), low4), _mm256_and_si256(h, bits45));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v2, 4), low4), _mm256_and_si256(_mm256_srli_epi16(h, 2), bits45));
  }
  static HWY_INLINE __m256i Lanes(const Plain& x, const Act& a) {
    __m256i isum = _mm256_setzero_si256();
    for (int n = 0; n < 2; ++n) {
      const int8_t* sc = x.scales + 8 * n;
      __m256i q[4];
      Unpack(Load32(x.ql + 64 * n), Load32(x.ql + 64 * n + 32), Load32(x.qh + 32 * n), q);
      for (int i = 0; i < 4; ++i) {  // a 32-value vector spans two groups: the first 16 in the low half
        const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(sc[2 * i + 1]), _mm_set1_epi16(sc[2 * i]));
        isum = _mm256_add_epi32(isum, DotBytesScaled(q[i], Load32(a.qs + 128 * n + 32 * i), scale));
      }
    }
    int offset = 0;
    for (int g = 0; g < 16; ++g) offset += x.scales[g] * a.bsums[g];
    return _mm256_sub_epi32(isum, _mm256_setr_epi32(32 * offset, 0, 0, 0, 0, 0, 0, 0));
  }
  template <int NT>
  static HWY_INLINE void Group(const X8& g, int64_t b, const Tile<NT>& t, __m256 (&acc)[NT]) {
    const __m256 d = HalvesToFloats(g.d);
    __m256i isum[NT];
    for (int k = 0; k < NT; ++k) isum[k] = _mm256_setzero_si256();
    for (int n = 0; n < 2; ++n) {
      for (int m0 = 0; m0 < 8; m0 += 2) {  // qh chunks m0, m0 + 1: values 4m0 .. 4m0 + 7 of each quarter
        __m256i q[2][4];
        for (int u = 0; u < 2; ++u) {
          const int m = m0 + u;
          Unpack(Load32(g.ql + 32 * (16 * n + m)), Load32(g.ql + 32 * (16 * n + m + 8)), Load32(g.qh + 32 * (8 * n + m)),
                 q[u]);
        }
        // Quarter i of half n holds values 128n + 32i + 4m: group 8n + 2i + m0 / 4.
        __m256i sc[4];
        for (int i = 0; i < 4; ++i) sc[i] = GroupScale16(g.scales, 8 * n + 2 * i + m0 / 4);
        for (int k = 0; k < NT; ++k) {
          const int8_t* qa = reinterpret_cast<const BlockQ8_K*>(t.act[k])[b].qs + 128 * n + 4 * m0;
          for (int i = 0; i < 4; ++i) {  // an int16 lane sums 4 products of at most 63 * 127
            const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(q[0][i], Broadcast4(qa + 32 * i)),
                                               _mm256_maddubs_epi16(q[1][i], Broadcast4(qa + 32 * i + 4)));
            isum[k] = _mm256_add_epi32(isum[k], _mm256_madd_epi16(p, sc[i]));
          }
        }
      }
    }
    for (int k = 0; k < NT; ++k) {
      const BlockQ8_K& a = reinterpret_cast<const BlockQ8_K*>(t.act[k])[b];
      const __m256i exact = _mm256_sub_epi32(isum[k], _mm256_slli_epi32(ScaledGroupSums(g.scales, a), 5));
      acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(exact), _mm256_mul_ps(d, _mm256_set1_ps(t.scales[k][b])), acc[k]);
    }
  }
#if HWY_TARGET == HWY_AVX3_DL
  static HWY_INLINE void Unpack(__m512i v1, __m512i v2, __m512i h, __m512i (&q)[4]) {  // as above, two groups
    const __m512i low4 = _mm512_set1_epi8(0x0F), low2 = _mm512_set1_epi8(0x03), bits45 = _mm512_set1_epi8(0x30);
    q[0] = _mm512_or_si512(_mm512_and_si512(v1, low4), _mm512_slli_epi16(_mm512_and_si512(h, low2), 4));
    q[1] = _mm512_or_si512(_mm512_and_si512(v2, low4), _mm512_and_si512(_mm512_slli_epi16(h, 2), bits45));
    q[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v1, 4), low4), _mm512_and_si512(h, bits45));
    q[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v2, 4), low4), _mm512_and_si512(_mm512_srli_epi16(h, 2), bits45));
  }
  // Group for two groups at once, with VNNI: each group's q6 . qa summed in
  // int32, then times its scale (vpmulld); the same exact isum as Group's.
  static constexpr bool kTwoGroups = true;
  template <int NT>
  static HWY_INLINE void TwoGroups(const X8& g0, const X8& g1, int64_t b, const Tile<NT>& t, __m512 (&acc)[NT]) {
    __m512i isum[NT];
    for (int k = 0; k < NT; ++k) isum[k] = _mm512_setzero_si512();
    for (int n = 0; n < 2; ++n) {
      for (int m0 = 0; m0 < 8; m0 += 4) {  // chunks m0 .. m0 + 3: quarter i's group 8n + 2i + m0 / 4
        __m512i p[NT][4];
        for (int k = 0; k < NT; ++k)
          for (int i = 0; i < 4; ++i) p[k][i] = _mm512_setzero_si512();
        for (int m = m0; m < m0 + 4; ++m) {
          __m512i q[4];
          Unpack(JoinLoad32(g0.ql + 32 * (16 * n + m), g1.ql + 32 * (16 * n + m)),
                 JoinLoad32(g0.ql + 32 * (16 * n + m + 8), g1.ql + 32 * (16 * n + m + 8)),
                 JoinLoad32(g0.qh + 32 * (8 * n + m), g1.qh + 32 * (8 * n + m)), q);
          for (int k = 0; k < NT; ++k) {
            const int8_t* qa = reinterpret_cast<const BlockQ8_K*>(t.act[k])[b].qs + 128 * n + 4 * m;
            for (int i = 0; i < 4; ++i) p[k][i] = AddDotBytes(p[k][i], q[i], Broadcast4x16(qa + 32 * i));
          }
        }
        for (int i = 0; i < 4; ++i) {
          const int group = 8 * n + 2 * i + m0 / 4;
          const __m512i scale = _mm512_maskz_cvtepi8_epi32(kLanes16, JoinLoad8(g0.scales + 8 * group, g1.scales + 8 * group));
          for (int k = 0; k < NT; ++k) isum[k] = _mm512_add_epi32(isum[k], _mm512_mullo_epi32(p[k][i], scale));
        }
      }
    }
    const __m512 d = Join8(HalvesToFloats(g0.d), HalvesToFloats(g1.d));
    for (int k = 0; k < NT; ++k) {
      const BlockQ8_K& a = reinterpret_cast<const BlockQ8_K*>(t.act[k])[b];
      const __m512i exact = _mm512_sub_epi32(isum[k], _mm512_maskz_slli_epi32(kLanes16, ScaledGroupSums(g0.scales, g1.scales, a), 5));
      acc[k] = _mm512_fmadd_ps(ToFloats(exact), _mm512_mul_ps(d, _mm512_set1_ps(t.scales[k][b])), acc[k]);
    }
  }
#endif
};

#endif  // x86 AVX2 and up

}  // namespace HWY_NAMESPACE
}  // namespace shoal
HWY_AFTER_NAMESPACE();

#endif  // include guard
