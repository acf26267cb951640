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
// the blocks (see "Chain kernels" below), whatever the layout or the tile.
//
// This translation unit must stay free of system and network headers that
// define short macros (Highway's headers break on <termios.h>'s B0).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tensor/gemm.cpp"
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "hwy/cache_control.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/interleave.h"
#include "tensor/matrix.h"
#include "tensor/vec_dot_common-inl.h"
#include "tensor/vec_dot_float-inl.h"

#if HWY_ARCH_X86
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace shoal {
namespace HWY_NAMESPACE {

// Fetches [p, p + bytes) into cache ahead of its use, a line at a time.
HWY_INLINE void PrefetchSpan(const uint8_t* p, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) hwy::Prefetch(p + o);
}

// Calls fn(std::integral_constant<int, K>) for K = n (1..kMax): a tile's
// token (or row) count as a compile-time constant.
template <int kMax = 4, class Fn>
HWY_INLINE void WithCount(int n, Fn&& fn) {
  if constexpr (kMax == 1) {
    fn(std::integral_constant<int, 1>());
  } else if (n == kMax) {
    fn(std::integral_constant<int, kMax>());
  } else {
    WithCount<kMax - 1>(n, fn);
  }
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2  // (re-evaluated per target: not a #define)

#if HWY_TARGET <= HWY_AVX3
// AVX-512 kernels hold two 8-lane vectors of the AVX2 kernels in one
// register (two float rows, or two groups of eight quantized rows), each
// half doing exactly the AVX2 arithmetic. The zero-masked intrinsics with every lane kept are the plain
// instructions: GCC 12's unmasked ones start from an "undefined" register
// that -Wmaybe-uninitialized reports.
constexpr __mmask16 kLanes16 = 0xFFFF;
constexpr __mmask8 kLanes8 = 0xFF;
constexpr __mmask32 kLanes32 = 0xFFFFFFFFu;
HWY_INLINE __m256 Half8(__m512 v, int upper) {
  return upper ? _mm512_maskz_extractf32x8_ps(kLanes8, v, 1) : _mm512_maskz_extractf32x8_ps(kLanes8, v, 0);
}
HWY_INLINE __m512 Twice(__m256 v) { return _mm512_maskz_broadcast_f32x8(kLanes16, v); }
HWY_INLINE __m512 ToFloats(__m512i v) { return _mm512_maskz_cvtepi32_ps(kLanes16, v); }
HWY_INLINE __m512 Join8(__m256 lo, __m256 hi) { return _mm512_maskz_insertf32x8(kLanes16, _mm512_castps256_ps512(lo), hi, 1); }
#endif

constexpr int kTileTokens = 4;

// Up to NT tokens' activations, as a kernel reads them. The accumulators are
// the caller's locals, passed by reference so that they stay in registers.
template <int NT>
struct Tile {
  static constexpr int kTokens = NT;
  const uint8_t* act[NT];        // each token's activation row
  const float* scales[NT];       // each token's activation scale per block, as floats
  const int32_t* sums[NT];       // Q8_0 activations: each block's sum of quants
};

// Four adjacent u8 * s8 products summed into each int32 lane, exactly.
HWY_INLINE __m256i DotBytes(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
// acc + DotBytes(u, s): one instruction with VNNI (vpdpbusd: four u8 * s8
// products added into an int32 lane, no int16 step; the same exact sums).
// Highway 1.0.3 runs its AVX3_DL target only where the CPU has AVX512-VNNI,
// but that target's compiler flags name AVX-VNNI, and GCC then emits the VEX
// form, which Zen 4 and Ice Lake lack: written out here in its EVEX form.
HWY_INLINE __m256i AddDotBytes(__m256i acc, __m256i u, __m256i s) {
#if HWY_TARGET == HWY_AVX3_DL
  asm("%{evex%} vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
#else
  return _mm256_add_epi32(acc, DotBytes(u, s));
#endif
}
#if HWY_TARGET == HWY_AVX3_DL
HWY_INLINE __m512i AddDotBytes(__m512i acc, __m512i u, __m512i s) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));  // 512-bit: EVEX only
  return acc;
}
#endif
// The same with each pair's int16 sum multiplied by a scale (int16 lanes).
HWY_INLINE __m256i DotBytesScaled(__m256i u, __m256i s, __m256i scale) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale);
}
HWY_INLINE __m256i Load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// The 32 nibbles of a 32-block, values 0..15 in value order (low nibbles
// are values 0..15, high nibbles 16..31).
HWY_INLINE __m256i Nibbles32(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i low4 = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low4), _mm_and_si128(q, low4));
}
// Byte j = 0xFF where bit j of bits is set.
HWY_INLINE __m256i BitsToBytes(uint32_t bits) {
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(bits)), spread);
  const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, select), select);
}

// Each token's activation scale per block as a float and, where the kernel
// needs it (Q4_0, Q5_0's offsets, Q4_1's min term), the sum of each Q8_0
// block's quants: once per call, not once per row. Thread-local: every
// thread of a matmul fills its own (a few hundred bytes a token).
struct ActivationInfo {
  std::vector<float> scales;  // [token][block]
  std::vector<int32_t> sums;  // [token][block], or empty
  void fill(DType act_type, bool with_sums, const uint8_t* act, size_t act_row_bytes, int n_tokens, int64_t nb) {
    scales.resize(static_cast<size_t>(n_tokens) * nb);
    sums.resize(with_sums ? static_cast<size_t>(n_tokens) * nb : 0);
    for (int t = 0; t < n_tokens; ++t) {
      const uint8_t* a = act + t * act_row_bytes;
      for (int64_t b = 0; b < nb; ++b) {
        if (act_type == DType::Q8_K) {
          scales[t * nb + b] = reinterpret_cast<const BlockQ8_K*>(a)[b].d;
          continue;
        }
        const BlockQ8_0& q = reinterpret_cast<const BlockQ8_0*>(a)[b];
        scales[t * nb + b] = F16ToF32(q.d);
        if (!with_sums) continue;
        int s = 0;
        for (int j = 0; j < kQK; ++j) s += q.qs[j];
        sums[t * nb + b] = s;
      }
    }
  }
};

template <int NT>
HWY_INLINE Tile<NT> MakeTile(const uint8_t* act, size_t act_row_bytes, const ActivationInfo& info, int t0,
                             int64_t nb) {
  Tile<NT> t;
  for (int k = 0; k < NT; ++k) {
    t.act[k] = act + (t0 + k) * act_row_bytes;
    t.scales[k] = info.scales.data() + (t0 + k) * nb;
    t.sums[k] = info.sums.empty() ? nullptr : info.sums.data() + (t0 + k) * nb;
  }
  return t;
}

// ---- Chain kernels (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K .. Q6_K): one float per
// (row, token),
//   acc = fma(float(exact block sum), dw * da, acc)   block after block
// (then Q4_1's acc = fma(m, da * sum(qa), acc) or Q4_K's
// acc = -(msum * (dmin * da)) + acc), the same arithmetic whether
// eight rows share a vector (x8 layout, lane = row) or one row runs alone
// (plain layout, scalar lane): the layout never changes a bit.

// The exact sum of a vector's int32 lanes.
HWY_INLINE int32_t SumLanes(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}
HWY_INLINE __m128 ChainStep(__m128 acc, int32_t isum, float scale) {
  return _mm_fmadd_ss(_mm_cvtsi32_ss(_mm_setzero_ps(), isum), _mm_set_ss(scale), acc);
}
HWY_INLINE __m256i Broadcast4(const int8_t* p) { return _mm256_set1_epi32(static_cast<int32_t>(load_u32_le(reinterpret_cast<const uint8_t*>(p)))); }
HWY_INLINE __m256 HalvesToFloats(const uint16_t* h) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
}

// What a chain kernel is: its x8 and plain blocks, its activation blocks,
// the offset its stored quants carry (taken off through the activation's
// block sum), and which min term it adds: Q4_1's m * da * sum(qa) or the
// K-quants' -dmin * da * msum.
template <class X8_, class Plain_, class Act_, int kOffset_ = 0, bool kMin_ = false, bool kKMin_ = false>
struct ChainTraits {
  using X8 = X8_;
  using Plain = Plain_;
  using Act = Act_;
  static constexpr int kOffset = kOffset_;
  static constexpr bool kMin = kMin_;
  static constexpr bool kKMin = kKMin_;
  static constexpr bool kTwoGroups = false;  // TwoGroups (two groups of eight rows per 512-bit register) on AVX3_DL
};

// The 4-bit quants of an x8 32-block: lo[c] holds values 4c..4c+3 and hi[c]
// values 16+4c.. of each row in its 32-bit lane.
struct GroupNibbles {
  __m256i lo[4], hi[4];
  explicit HWY_INLINE GroupNibbles(const uint8_t* qs) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int c = 0; c < 4; ++c) {
      const __m256i v = Load32(qs + 32 * c);
      lo[c] = _mm256_and_si256(v, low4);
      hi[c] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    }
  }
  // Each row's q . qa over the block, exactly (an int16 lane sums 16
  // products of at most 15 * 127 before widening).
  HWY_INLINE __m256i Dot(const int8_t* qa) const {
    __m256i p = _mm256_setzero_si256();
#if HWY_TARGET == HWY_AVX3_DL
    // Two chains of four: each vpdpbusd waits on the last one's sum.
    __m256i p_hi = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      p = AddDotBytes(p, lo[c], Broadcast4(qa + 4 * c));
      p_hi = AddDotBytes(p_hi, hi[c], Broadcast4(qa + 16 + 4 * c));
    }
    return _mm256_add_epi32(p, p_hi);
#else
    for (int c = 0; c < 4; ++c) {
      p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lo[c], Broadcast4(qa + 4 * c)));
      p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi[c], Broadcast4(qa + 16 + 4 * c)));
    }
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
#endif
  }
};

#if HWY_TARGET == HWY_AVX3_DL
// GroupNibbles of two adjacent groups in one register: the first group's
// eight rows in the low half, the second's in the high. Against one token
// this is the cheapest way to fill 512 bits: a plain broadcast of the
// activation's four bytes serves sixteen rows (two tokens per register
// would need a merge per broadcast, and measured no faster).
HWY_INLINE __m512i Broadcast4x16(const int8_t* p) {
  return _mm512_set1_epi32(static_cast<int32_t>(load_u32_le(reinterpret_cast<const uint8_t*>(p))));
}
HWY_INLINE __m512i JoinLoad32(const void* lo, const void* hi) {
  return _mm512_maskz_inserti64x4(kLanes8, _mm512_castsi256_si512(Load32(lo)), Load32(hi), 1);
}
struct TwoGroupNibbles {
  __m512i lo[4], hi[4];
  // Q4_0/Q4_1 quants; with qh (Q5_0/Q5_1), each value's fifth bit as in
  // Q5_xChain::Group (bit c of qh's bytes for lo[c], bit 4 + c for hi[c]).
  HWY_INLINE TwoGroupNibbles(const uint8_t* qs0, const uint8_t* qs1, const uint8_t* qh0 = nullptr,
                             const uint8_t* qh1 = nullptr) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int c = 0; c < 4; ++c) {
      const __m512i v = JoinLoad32(qs0 + 32 * c, qs1 + 32 * c);
      lo[c] = _mm512_and_si512(v, low4);
      hi[c] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
    }
    if (qh0) {
      const __m512i qh = JoinLoad32(qh0, qh1), bit4 = _mm512_set1_epi8(0x10);
      for (int c = 0; c < 4; ++c) {  // bit c to bit 4 (a 16-bit shift of at most 4 stays within each byte)
        lo[c] = _mm512_or_si512(lo[c], _mm512_and_si512(_mm512_slli_epi16(qh, 4 - c), bit4));
        hi[c] = _mm512_or_si512(hi[c], _mm512_and_si512(c == 0 ? qh : _mm512_srli_epi16(qh, c), bit4));
      }
    }
  }
  HWY_INLINE __m512i Dot(const int8_t* qa) const {
    __m512i p = _mm512_setzero_si512(), p_hi = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {
      p = AddDotBytes(p, lo[c], Broadcast4x16(qa + 4 * c));
      p_hi = AddDotBytes(p_hi, hi[c], Broadcast4x16(qa + 16 + 4 * c));
    }
    return _mm512_add_epi32(p, p_hi);
  }
};
#endif

struct Q4_0Chain : ChainTraits<BlockQ4_0x8, BlockQ4_0, BlockQ8_0, 8> {  // q is stored + 8: it comes off through the activation sum
  static HWY_INLINE __m256i Lanes(const Plain& x, const BlockQ8_0& a) { return DotBytes(Nibbles32(x.qs), Load32(a.qs)); }
  template <int NT>
  static HWY_INLINE void Group(const X8& g, int64_t b, const Tile<NT>& t, __m256 (&acc)[NT]) {
    const __m256 dw = HalvesToFloats(g.d);
    const GroupNibbles q(g.qs);
    for (int k = 0; k < NT; ++k) {
      const BlockQ8_0& a = reinterpret_cast<const BlockQ8_0*>(t.act[k])[b];
      const __m256i isum = _mm256_sub_epi32(q.Dot(a.qs), _mm256_set1_epi32(8 * t.sums[k][b]));
      acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(t.scales[k][b])), acc[k]);
    }
  }
#if HWY_TARGET == HWY_AVX3_DL
  static constexpr bool kTwoGroups = true;
  // Group for groups g0 and g1 at once: acc[k]'s low half is g0's rows, the high half g1's.
  template <int NT>
  static HWY_INLINE void TwoGroups(const X8& g0, const X8& g1, int64_t b, const Tile<NT>& t, __m512 (&acc)[NT]) {
    const __m512 dw = Join8(HalvesToFloats(g0.d), HalvesToFloats(g1.d));
    const TwoGroupNibbles q(g0.qs, g1.qs);
    for (int k = 0; k < NT; ++k) {
      const BlockQ8_0& a = reinterpret_cast<const BlockQ8_0*>(t.act[k])[b];
      const __m512i isum = _mm512_sub_epi32(q.Dot(a.qs), _mm512_set1_epi32(8 * t.sums[k][b]));
      acc[k] = _mm512_fmadd_ps(ToFloats(isum), _mm512_mul_ps(dw, _mm512_set1_ps(t.scales[k][b])), acc[k]);
    }
  }
#endif
};

struct Q4_1Chain : ChainTraits<BlockQ4_1x8, BlockQ4_1, BlockQ8_0, 0, true> {  // x = d * q + m
  static HWY_INLINE __m256i Lanes(const Plain& x, const BlockQ8_0& a) { return DotBytes(Nibbles32(x.qs), Load32(a.qs)); }
  template <int NT>
  static HWY_INLINE void Group(const X8& g, int64_t b, const Tile<NT>& t, __m256 (&acc)[NT]) {
    const __m256 dw = HalvesToFloats(g.d), mw = HalvesToFloats(g.m);
    const GroupNibbles q(g.qs);
    for (int k = 0; k < NT; ++k) {
      const BlockQ8_0& a = reinterpret_cast<const BlockQ8_0*>(t.act[k])[b];
      const float da = t.scales[k][b];
      const __m256 main = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q.Dot(a.qs)), _mm256_mul_ps(dw, _mm256_set1_ps(da)), acc[k]);
      acc[k] = _mm256_fmadd_ps(mw, _mm256_set1_ps(da * static_cast<float>(t.sums[k][b])), main);
    }
  }
#if HWY_TARGET == HWY_AVX3_DL
  static constexpr bool kTwoGroups = true;
  template <int NT>
  static HWY_INLINE void TwoGroups(const X8& g0, const X8& g1, int64_t b, const Tile<NT>& t, __m512 (&acc)[NT]) {
    const __m512 dw = Join8(HalvesToFloats(g0.d), HalvesToFloats(g1.d)), mw = Join8(HalvesToFloats(g0.m), HalvesToFloats(g1.m));
    const TwoGroupNibbles q(g0.qs, g1.qs);
    for (int k = 0; k < NT; ++k) {
      const BlockQ8_0& a = reinterpret_cast<const BlockQ8_0*>(t.act[k])[b];
      const float da = t.scales[k][b];
      const __m512 main = _mm512_fmadd_ps(ToFloats(q.Dot(a.qs)), _mm512_mul_ps(dw, _mm512_set1_ps(da)), acc[k]);
      acc[k] = _mm512_fmadd_ps(mw, _mm512_set1_ps(da * static_cast<float>(t.sums[k][b])), main);
    }
  }
#endif
};

// Bit v of each byte of qh moved to bit 4 (0x10 per byte): a fifth bit put
// in place above its nibble. A 16-bit shift of at most 4 keeps every byte's
// bit 4 within its own byte. (Where a loop unrolls, v is a constant.)
HWY_INLINE __m256i FifthBits(__m256i qh, int v) {
  const __m256i at4 = v < 4 ? _mm256_slli_epi16(qh, 4 - v) : _mm256_srli_epi16(qh, v - 4);
  return _mm256_and_si256(at4, _mm256_set1_epi8(0x10));
}
#if HWY_TARGET == HWY_AVX3_DL
HWY_INLINE __m512i FifthBits(__m512i qh, int v) {
  const __m512i at4 = v < 4 ? _mm512_slli_epi16(qh, 4 - v) : _mm512_srli_epi16(qh, v - 4);
  return _mm512_and_si512(at4, _mm512_set1_epi8(0x10));
}
#endif

// Q5_0 (q stored + 16, taken off through the activation sum) and Q5_1
// (x = d * q + m, Q4_1's min term): the same fifth bits.
template <class X8_, class Plain_, bool kWithMin>
struct Q5_xChain : ChainTraits<X8_, Plain_, BlockQ8_0, kWithMin ? 0 : 16, kWithMin> {
  using X8 = X8_;
  using Plain = Plain_;
  static HWY_INLINE __m256i Lanes(const Plain& x, const BlockQ8_0& a) {
    const __m256i fifth = _mm256_and_si256(BitsToBytes(load_u32_le(x.qh)), _mm256_set1_epi8(0x10));
    return DotBytes(_mm256_or_si256(Nibbles32(x.qs), fifth), Load32(a.qs));
  }
  template <int NT>
  static HWY_INLINE void Group(const X8& g, int64_t b, const Tile<NT>& t, __m256 (&acc)[NT]) {
    const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1), qh = Load32(g.qh);
    __m256i isum[NT];
    for (int k = 0; k < NT; ++k) isum[k] = _mm256_setzero_si256();
    // Half a block at a time (chunks c and c + 1: values 4c.., 16 + 4c..,
    // 4c + 4.., 20 + 4c.. of each row), so that four tokens' sums and half a
    // block's quants fit the registers together.
    auto half = [&](auto c_const) {
      constexpr int c = decltype(c_const)::value;
      const __m256i v0 = Load32(g.qs + 32 * c), v1 = Load32(g.qs + 32 * (c + 1));
      const __m256i lo0 = _mm256_or_si256(_mm256_and_si256(v0, low4), FifthBits(qh, c));
      const __m256i hi0 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v0, 4), low4), FifthBits(qh, 4 + c));
      const __m256i lo1 = _mm256_or_si256(_mm256_and_si256(v1, low4), FifthBits(qh, c + 1));
      const __m256i hi1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v1, 4), low4), FifthBits(qh, 5 + c));
      for (int k = 0; k < NT; ++k) {
        const int8_t* qa = reinterpret_cast<const BlockQ8_0*>(t.act[k])[b].qs;
#if HWY_TARGET == HWY_AVX3_DL
        isum[k] = AddDotBytes(isum[k], lo0, Broadcast4(qa + 4 * c));
        isum[k] = AddDotBytes(isum[k], hi0, Broadcast4(qa + 16 + 4 * c));
        isum[k] = AddDotBytes(isum[k], lo1, Broadcast4(qa + 4 * c + 4));
        isum[k] = AddDotBytes(isum[k], hi1, Broadcast4(qa + 16 + 4 * c + 4));
#else
        // An int16 lane sums 8 products of at most 31 * 127 before widening.
        __m256i p = _mm256_maddubs_epi16(lo0, Broadcast4(qa + 4 * c));
        p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi0, Broadcast4(qa + 16 + 4 * c)));
        p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lo1, Broadcast4(qa + 4 * c + 4)));
        p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi1, Broadcast4(qa + 16 + 4 * c + 4)));
        isum[k] = _mm256_add_epi32(isum[k], _mm256_madd_epi16(p, ones));
#endif
      }
    };
    half(std::integral_constant<int, 0>());
    half(std::integral_constant<int, 2>());
    const __m256 dw = HalvesToFloats(g.d);
    __m256 mw = _mm256_setzero_ps();
    if constexpr (kWithMin) mw = HalvesToFloats(g.m);
    for (int k = 0; k < NT; ++k) {
      const float da = t.scales[k][b];
      if constexpr (kWithMin) {  // as Q4_1
        const __m256 main = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[k]), _mm256_mul_ps(dw, _mm256_set1_ps(da)), acc[k]);
        acc[k] = _mm256_fmadd_ps(mw, _mm256_set1_ps(da * static_cast<float>(t.sums[k][b])), main);
      } else {
        const __m256i exact = _mm256_sub_epi32(isum[k], _mm256_set1_epi32(16 * t.sums[k][b]));
        acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(exact), _mm256_mul_ps(dw, _mm256_set1_ps(da)), acc[k]);
      }
    }
  }
#if HWY_TARGET == HWY_AVX3_DL
  static constexpr bool kTwoGroups = true;
  template <int NT>
  static HWY_INLINE void TwoGroups(const X8& g0, const X8& g1, int64_t b, const Tile<NT>& t, __m512 (&acc)[NT]) {
    const TwoGroupNibbles q(g0.qs, g1.qs, g0.qh, g1.qh);
    const __m512 dw = Join8(HalvesToFloats(g0.d), HalvesToFloats(g1.d));
    __m512 mw = _mm512_setzero_ps();
    if constexpr (kWithMin) mw = Join8(HalvesToFloats(g0.m), HalvesToFloats(g1.m));
    for (int k = 0; k < NT; ++k) {
      const BlockQ8_0& a = reinterpret_cast<const BlockQ8_0*>(t.act[k])[b];
      const float da = t.scales[k][b];
      if constexpr (kWithMin) {  // as Group
        const __m512 main = _mm512_fmadd_ps(ToFloats(q.Dot(a.qs)), _mm512_mul_ps(dw, _mm512_set1_ps(da)), acc[k]);
        acc[k] = _mm512_fmadd_ps(mw, _mm512_set1_ps(da * static_cast<float>(t.sums[k][b])), main);
      } else {
        const __m512i exact = _mm512_sub_epi32(q.Dot(a.qs), _mm512_set1_epi32(16 * t.sums[k][b]));
        acc[k] = _mm512_fmadd_ps(ToFloats(exact), _mm512_mul_ps(dw, _mm512_set1_ps(da)), acc[k]);
      }
    }
  }
#endif
};
using Q5_0Chain = Q5_xChain<BlockQ5_0x8, BlockQ5_0, false>;
using Q5_1Chain = Q5_xChain<BlockQ5_1x8, BlockQ5_1, true>;

struct Q8_0Chain : ChainTraits<BlockQ8_0x8, BlockQ8_0, BlockQ8_0> {
  static HWY_INLINE __m256i Lanes(const Plain& x, const BlockQ8_0& a) {
    const __m256i w = Load32(x.qs);
    return DotBytes(_mm256_sign_epi8(w, w), _mm256_sign_epi8(Load32(a.qs), w));
  }
  template <int NT>
  static HWY_INLINE void Group(const X8& g, int64_t b, const Tile<NT>& t, __m256 (&acc)[NT]) {
    const __m256 dw = HalvesToFloats(g.d);
    __m256i isum[NT];
    for (int k = 0; k < NT; ++k) isum[k] = _mm256_setzero_si256();
    for (int c = 0; c < 8; ++c) {
      const __m256i w = Load32(g.qs + 32 * c), abs_w = _mm256_sign_epi8(w, w);
      for (int k = 0; k < NT; ++k) {
        const int8_t* qa = reinterpret_cast<const BlockQ8_0*>(t.act[k])[b].qs;
        isum[k] = AddDotBytes(isum[k], abs_w, _mm256_sign_epi8(Broadcast4(qa + 4 * c), w));
      }
    }
    for (int k = 0; k < NT; ++k)
      acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[k]), _mm256_mul_ps(dw, _mm256_set1_ps(t.scales[k][b])), acc[k]);
  }
#if HWY_TARGET == HWY_AVX3_DL
  // AVX-512 has no vpsignb: the signed quants flipped to unsigned w + 128
  // instead (one xor per 64 bytes, for every token), and 128 * sum(qa)
  // taken off again: the same exact sum as Group's.
  static constexpr bool kTwoGroups = true;
  template <int NT>
  static HWY_INLINE void TwoGroups(const X8& g0, const X8& g1, int64_t b, const Tile<NT>& t, __m512 (&acc)[NT]) {
    const __m512 dw = Join8(HalvesToFloats(g0.d), HalvesToFloats(g1.d));
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    __m512i u[8];
    for (int c = 0; c < 8; ++c) u[c] = _mm512_xor_si512(JoinLoad32(g0.qs + 32 * c, g1.qs + 32 * c), flip);
    for (int k = 0; k < NT; ++k) {
      const int8_t* qa = reinterpret_cast<const BlockQ8_0*>(t.act[k])[b].qs;
      __m512i p = _mm512_setzero_si512(), p_odd = _mm512_setzero_si512();
      for (int c = 0; c < 8; c += 2) {
        p = AddDotBytes(p, u[c], Broadcast4x16(qa + 4 * c));
        p_odd = AddDotBytes(p_odd, u[c + 1], Broadcast4x16(qa + 4 * c + 4));
      }
      const __m512i isum = _mm512_sub_epi32(_mm512_add_epi32(p, p_odd), _mm512_set1_epi32(128 * t.sums[k][b]));
      acc[k] = _mm512_fmadd_ps(ToFloats(isum), _mm512_mul_ps(dw, _mm512_set1_ps(t.scales[k][b])), acc[k]);
    }
  }
#endif
};

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
  const float dw = F16ToF32(x.d);
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
    dw[r] = F16ToF32(x.d);
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

// Grouped rows are one sequential stream, yet the hardware prefetcher of
// the machine measured (a Zen 3 guest) falls behind it: the first pass
// over a group fetches 2 KiB ahead itself (decode +15-20%,
// docs/benchmarks.md). Two groups at once are two streams, and each needs
// it (four tokens on weights streamed from memory, Zen 5: 8-18 GB/s with
// only the second fetched ahead, 19-25 with both). 4 KiB rather than 2:
// Zen 5 decodes 10-20 % faster on one thread with it; on Zen 3, 4 and 8
// KiB measured the same as 2.
constexpr size_t kGroupAhead = 4096;

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

// ---- Float weights (F32, F16, BF16) against f32 activations, on every
// fixed-width target. Per element one chain, acc = w * a + acc over the
// 8-lane vectors in order (a last partial vector zero-padded), then the
// lanes summed: the same arithmetic whatever tile the element lands in.
// Prefill takes tiles of three rows by four tokens (12 accumulators, 3
// weight vectors and 1 activation: AVX2's 16 registers), so each weight
// vector is loaded and widened once for four tokens and each activation
// vector once for three rows (AVX-512: FloatTilePairs below, the same
// chains two to a register). Decode takes four rows at a time, four
// chains to cover the multiply-add's latency, and prefetches the next four
// as it goes: four short streams at once are more than the hardware
// prefetcher follows (a prefetch past the matrix's end does not fault).
#if !HWY_HAVE_SCALABLE
using DFloat = hn::CappedTag<float, 8>;

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

template <class Weights, int R, int T>
HWY_INLINE void FloatTile(const uint8_t* const (&rows)[R], const float* const (&acts)[T], size_t n, float* y,
                          int64_t y_stride, const uint8_t* ahead) {
  const DFloat d;
  const size_t N = hn::Lanes(d);
  using V = hn::Vec<DFloat>;
  V acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = hn::Zero(d);
  auto step = [&](auto load_w, auto load_a) {
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
    step([&](int r) { return Weights{rows[r]}.Load(d, i); }, [&](int t) { return hn::LoadU(d, acts[t] + i); });
  }
  if (i < n) {
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
HWY_INLINE __m512 LoadRowPair(F32Weights a, F32Weights b, size_t i) {
  return Join8(_mm256_loadu_ps(reinterpret_cast<const float*>(a.p) + i), _mm256_loadu_ps(reinterpret_cast<const float*>(b.p) + i));
}
HWY_INLINE __m256i HalvesPair(const uint8_t* a, const uint8_t* b, size_t i) {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 2 * i))),
                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 * i)), 1);
}
HWY_INLINE __m512 LoadRowPair(F16Weights a, F16Weights b, size_t i) {
  return _mm512_maskz_cvtph_ps(kLanes16, HalvesPair(a.p, b.p, i));
}
HWY_INLINE __m512 LoadRowPair(BF16Weights a, BF16Weights b, size_t i) {  // bf16 is the top half of an f32
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kLanes16, _mm512_maskz_cvtepu16_epi32(kLanes16, HalvesPair(a.p, b.p, i)), 16));
}

template <class Weights, int P, int T>
HWY_INLINE void FloatTilePairs(const uint8_t* const (&rows)[2 * P], const float* const (&acts)[T], size_t n, float* y,
                               int64_t y_stride, const uint8_t* ahead) {
  __m512 acc[P][T];
  for (int p = 0; p < P; ++p)
    for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
  auto step = [&](auto load_w, auto load_a) {
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
    step([&](int p) { return LoadRowPair(Weights{rows[2 * p]}, Weights{rows[2 * p + 1]}, i); },
         [&](int t) { return load_a(acts[t] + i); });
  }
  if (i < n) {  // FloatTile's zero-padded last vector
    const size_t m = n - i;
    HWY_ALIGN uint8_t w_tail[2 * P][8 * Weights::kBytes] = {};
    HWY_ALIGN float a_tail[T][8] = {};
    for (int r = 0; r < 2 * P; ++r) std::memcpy(w_tail[r], rows[r] + i * Weights::kBytes, m * Weights::kBytes);
    for (int t = 0; t < T; ++t) std::memcpy(a_tail[t], acts[t] + i, m * sizeof(float));
    step([&](int p) { return LoadRowPair(Weights{w_tail[2 * p]}, Weights{w_tail[2 * p + 1]}, 0); },
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
template <class Weights>
void FloatRowsPaired(const Matrix& w, int64_t r0, int64_t r1, const uint8_t* act, size_t act_row_bytes, int n_tokens,
                     float* y, int64_t y_stride) {
  constexpr int kPairs = 4, kTokens = 6;
  constexpr int64_t kRowGroup = 3 * 2 * kPairs;  // rows that stay in cache while the token tiles pass
  const size_t n = static_cast<size_t>(w.cols), stride = w.row_stride();
  auto row = [&](int64_t r) { return w.data + static_cast<size_t>(r) * stride; };
  for (int64_t g0 = r0; g0 < r1; g0 += kRowGroup) {
    const int64_t g1 = std::min(r1, g0 + kRowGroup);
    for (int t0 = 0; t0 < n_tokens; t0 += kTokens)
      WithCount<kTokens>(std::min(kTokens, n_tokens - t0), [&](auto tokens_c) {
        constexpr int T = decltype(tokens_c)::value;
        const float* acts[T];
        for (int k = 0; k < T; ++k) acts[k] = reinterpret_cast<const float*>(act + (t0 + k) * act_row_bytes);
        for (int64_t r = g0; r < g1; r += 2 * kPairs) {
          const uint8_t* rows[2 * kPairs];
          for (int k = 0; k < 2 * kPairs; ++k) rows[k] = row(r + k);
          // The first pass over a group fetches the next group into cache.
          const int64_t next = r + kRowGroup;
          FloatTilePairs<Weights, kPairs, T>(rows, acts, n, y + t0 * y_stride + r, y_stride,
                                             t0 == 0 && next < r1 ? row(next) : nullptr);
        }
      });
  }
}
#endif  // AVX-512

template <class Weights>
void FloatRows(const Matrix& w, int64_t r0, int64_t r1, const uint8_t* act, size_t act_row_bytes, int n_tokens,
               float* y, int64_t y_stride) {
  constexpr int kRows = 3, kTokens = 4, kDecodeRows = 4;
  constexpr int64_t kRowGroup = 8 * kRows;  // rows that stay in cache while the token tiles pass
  const size_t n = static_cast<size_t>(w.cols), stride = w.row_stride();
  auto row = [&](int64_t r) { return w.data + static_cast<size_t>(r) * stride; };
  // The tile of rows r.. and tokens t0.., both counts at most four,
  // prefetching from `ahead` (or not: nullptr) as it goes.
  auto tile = [&](int n_rows, int n_tile_tokens, int64_t r, int t0, const uint8_t* ahead) {
    WithCount(n_rows, [&](auto rows_c) {
      WithCount(n_tile_tokens, [&](auto tokens_c) {
        constexpr int R = decltype(rows_c)::value, T = decltype(tokens_c)::value;
        const uint8_t* rows[R];
        const float* acts[T];
        for (int k = 0; k < R; ++k) rows[k] = row(r + k);
        for (int k = 0; k < T; ++k) acts[k] = reinterpret_cast<const float*>(act + (t0 + k) * act_row_bytes);
        FloatTile<Weights, R, T>(rows, acts, n, y + t0 * y_stride + r, y_stride, ahead);
      });
    });
  };
  if (n_tokens == 1) {
    for (int64_t r = r0; r < r1; r += kDecodeRows) {
      const int64_t next = r + kDecodeRows;
      tile(static_cast<int>(std::min<int64_t>(kDecodeRows, r1 - r)), 1, r, 0, next < r1 ? row(next) : nullptr);
    }
    return;
  }
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  const int64_t paired_end = r0 + (r1 - r0) / 8 * 8;
  FloatRowsPaired<Weights>(w, r0, paired_end, act, act_row_bytes, n_tokens, y, y_stride);
  r0 = paired_end;  // the last rows, fewer than eight, as below
#endif
  for (int64_t g0 = r0; g0 < r1; g0 += kRowGroup) {
    const int64_t g1 = std::min(r1, g0 + kRowGroup);
    for (int t0 = 0; t0 < n_tokens; t0 += kTokens)
      for (int64_t r = g0; r < g1; r += kRows) {
        // The first pass over a group fetches the next group into cache.
        const int64_t next = r + kRowGroup;
        tile(static_cast<int>(std::min<int64_t>(kRows, g1 - r)), std::min(kTokens, n_tokens - t0), r, t0,
             t0 == 0 && next < r1 ? row(next) : nullptr);
      }
  }
}
#endif  // fixed-width vectors

bool GroupsSupported() {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  return true;
#else
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
#include "tensor/gemm.h"
#include "tensor/vec_dot.h"
#include "util/error.h"

namespace shoal {

HWY_EXPORT(GemmRows);
HWY_EXPORT(GroupsSupported);

bool gemm_reads_groups() { return HWY_DYNAMIC_DISPATCH(GroupsSupported)(); }

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
