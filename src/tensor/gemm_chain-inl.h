// The quantized matmul's building blocks (see gemm.cpp): a tile of tokens'
// activations, their per-block scales and sums, the exact integer dot
// products (vpmaddubsw/vpmaddwd, or vpdpbusd with VNNI), and the chain
// kernels of the 32-value block types Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0.
#if defined(SHOAL_TENSOR_GEMM_CHAIN_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SHOAL_TENSOR_GEMM_CHAIN_INL_H_
#undef SHOAL_TENSOR_GEMM_CHAIN_INL_H_
#else
#define SHOAL_TENSOR_GEMM_CHAIN_INL_H_
#endif

#include <cstdint>
#include <vector>

#include "hwy/highway.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/gemm_common-inl.h"
#include "tensor/interleave.h"
#include "tensor/vec_dot_common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace shoal {
namespace HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2  // (re-evaluated per target: not a #define)

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
// Highway 1.0.3's AVX3_DL compiler flags name AVX-VNNI, not AVX512-VNNI, so
// the 512-bit intrinsic is refused there: written out in its EVEX form (the
// CPUs that run AVX3_DL have both, tensor/simd_targets.h).
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
  // A plain block's scale.
  template <class P>
  static HWY_INLINE float RowScale(const P& x) { return F16ToF32(x.d); }
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

// MXFP4: each nibble's doubled E2M1 value looked up by one byte shuffle,
// then |w| * (a with w's sign), the exact w * a without an unsigned offset
// (|w| <= 12: an int16 lane's sum of 16 products stays below 2^15); the
// scale is 2^(e - 128).
HWY_INLINE __m256i Mxfp4Table() {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values)));
}
// 2^(e - 128) of eight E8M0 bytes, exactly as e8m0_half.
HWY_INLINE __m256 E8M0HalfToFloats(const uint8_t* e) {
  const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e)));
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(v, _mm256_set1_epi32(1)), 23);
  const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), v);  // e < 2: subnormal
  const __m256i is_tiny = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), v);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, is_tiny));
}
struct Mxfp4Chain : ChainTraits<BlockMXFP4x8, BlockMXFP4, BlockQ8_0> {
  static HWY_INLINE float RowScale(const BlockMXFP4& x) { return e8m0_half(x.e); }
  static HWY_INLINE __m256i Lanes(const Plain& x, const BlockQ8_0& a) {
    const __m256i w = _mm256_shuffle_epi8(Mxfp4Table(), Nibbles32(x.qs));
    return DotBytes(_mm256_abs_epi8(w), _mm256_sign_epi8(Load32(a.qs), w));
  }
  template <int NT>
  static HWY_INLINE void Group(const X8& g, int64_t b, const Tile<NT>& t, __m256 (&acc)[NT]) {
    const __m256 dw = E8M0HalfToFloats(g.e);
    const GroupNibbles q(g.qs);
    const __m256i table = Mxfp4Table();
    __m256i lo[4], hi[4], lo_abs[4], hi_abs[4];
    for (int c = 0; c < 4; ++c) {
      lo[c] = _mm256_shuffle_epi8(table, q.lo[c]);
      hi[c] = _mm256_shuffle_epi8(table, q.hi[c]);
      lo_abs[c] = _mm256_abs_epi8(lo[c]);
      hi_abs[c] = _mm256_abs_epi8(hi[c]);
    }
    for (int k = 0; k < NT; ++k) {
      const BlockQ8_0& a = reinterpret_cast<const BlockQ8_0*>(t.act[k])[b];
      __m256i p = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lo_abs[c], _mm256_sign_epi8(Broadcast4(a.qs + 4 * c), lo[c])));
        p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi_abs[c], _mm256_sign_epi8(Broadcast4(a.qs + 16 + 4 * c), hi[c])));
      }
      const __m256i isum = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
      acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(t.scales[k][b])), acc[k]);
    }
  }
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

#endif  // x86 AVX2 and up

}  // namespace HWY_NAMESPACE
}  // namespace shoal
HWY_AFTER_NAMESPACE();

#endif  // include guard
