// gemm_rows (see gemm.h). The tile kernels are x86 code inside Highway's
// per-target compilation: the AVX2 target and the AVX-512 targets (which
// include AVX2) build them; every other target reports "not handled" and
// the caller falls back to vec_dot per element.
//
// Integer products: vpmaddubsw multiplies unsigned weight bytes with signed
// activation bytes and adds pairs into int16 (no saturation here: weights
// are at most 128 in magnitude, activations at most 127, so a pair is at
// most 32512); vpmaddwd then adds pairs into int32, times 1 or a sub-block
// scale, exactly. Signed weights (Q4_0, Q5_0, Q8_0) use |w| and the
// activation with w's sign. Per block the int32 lanes become floats once and
// meet the two scales in one multiply-add; even and odd blocks go to two
// accumulators per token (two chains hide the latency) that are added at the
// end in a fixed order.
//
// This translation unit must stay free of system and network headers that
// define short macros (Highway's headers break on <termios.h>'s B0).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tensor/gemm.cpp"
#include <algorithm>
#include <type_traits>
#include <vector>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/vec_dot_common-inl.h"

#if HWY_ARCH_X86
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace shoal {
namespace HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2  // (re-evaluated per target: not a #define)

constexpr int kTileTokens = 4;  // two pairs

constexpr DType activation_dtype_of(DType weight) {
  return weight == DType::Q4_K || weight == DType::Q6_K ? DType::Q8_K : DType::Q8_0;
}

// Up to NT tokens' activations against one row. Each token has two float
// accumulators (even and odd blocks), RowTile's locals, passed to Block by
// reference so that they stay in registers.
template <int NT>
struct Tile {
  const uint8_t* act[NT];        // each token's activation row
  const float* scales[NT];       // each token's activation scale per block, as floats
  const float* min_terms[NT];    // Q4_1: per block, activation scale * sum of the block's quants
};

// Four adjacent u8 * s8 products summed into each int32 lane, exactly.
HWY_INLINE __m256i DotBytes(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
// The same with each pair's int16 sum multiplied by a scale (int16 lanes).
HWY_INLINE __m256i DotBytesScaled(__m256i u, __m256i s, __m256i scale) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale);
}
HWY_INLINE __m256i Load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// acc[k] += float(block sums of token k) * (dw * its activation scale).
template <int NT>
HWY_INLINE void AddBlock(const __m256i (&isum)[NT], float dw, const Tile<NT>& t, int64_t b, __m256 (&acc)[NT]) {
  for (int k = 0; k < NT; ++k)
    acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[k]), _mm256_set1_ps(dw * t.scales[k][b]), acc[k]);
}

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

// Signed 32-blocks against Q8_0: |w| and the activation with w's sign.
template <int NT>
HWY_INLINE void SignedBlock(__m256i w, float dw, int64_t b, const Tile<NT>& t, __m256 (&acc)[NT]) {
  const __m256i abs_w = _mm256_sign_epi8(w, w);
  __m256i isum[NT];
  for (int k = 0; k < NT; ++k) {
    const BlockQ8_0& a = reinterpret_cast<const BlockQ8_0*>(t.act[k])[b];
    isum[k] = DotBytes(abs_w, _mm256_sign_epi8(Load32(a.qs), w));
  }
  AddBlock(isum, dw, t, b, acc);
}

struct Q4_0Tiles {
  static constexpr DType kType = DType::Q4_0;
  static constexpr bool kRowMins = false;
  template <int NT>
  HWY_INLINE void Block(const uint8_t* row, int64_t b, const Tile<NT>& t, __m256 (&acc)[NT]) const {
    const BlockQ4_0& x = reinterpret_cast<const BlockQ4_0*>(row)[b];
    SignedBlock(_mm256_sub_epi8(Nibbles32(x.qs), _mm256_set1_epi8(8)), F16ToF32(x.d), b, t, acc);
  }
};

struct Q5_0Tiles {
  static constexpr DType kType = DType::Q5_0;
  static constexpr bool kRowMins = false;
  template <int NT>
  HWY_INLINE void Block(const uint8_t* row, int64_t b, const Tile<NT>& t, __m256 (&acc)[NT]) const {
    const BlockQ5_0& x = reinterpret_cast<const BlockQ5_0*>(row)[b];
    const __m256i fifth = _mm256_and_si256(BitsToBytes(load_u32_le(x.qh)), _mm256_set1_epi8(0x10));
    const __m256i q = _mm256_or_si256(Nibbles32(x.qs), fifth);
    SignedBlock(_mm256_sub_epi8(q, _mm256_set1_epi8(16)), F16ToF32(x.d), b, t, acc);
  }
};

struct Q8_0Tiles {
  static constexpr DType kType = DType::Q8_0;
  static constexpr bool kRowMins = false;
  template <int NT>
  HWY_INLINE void Block(const uint8_t* row, int64_t b, const Tile<NT>& t, __m256 (&acc)[NT]) const {
    const BlockQ8_0& x = reinterpret_cast<const BlockQ8_0*>(row)[b];
    SignedBlock(Load32(x.qs), F16ToF32(x.d), b, t, acc);
  }
};

// Q4_1: x = d * q + m, so x . a = d * da * (q . qa) + m * da * sum(qa). The
// second term is one dot per row over the blocks: the row's m against the
// token's da * sum(qa) (RowTile, kRowMins).
struct Q4_1Tiles {
  static constexpr DType kType = DType::Q4_1;
  static constexpr bool kRowMins = true;
  static float Min(const uint8_t* row, int64_t b) { return F16ToF32(reinterpret_cast<const BlockQ4_1*>(row)[b].m); }
  template <int NT>
  HWY_INLINE void Block(const uint8_t* row, int64_t b, const Tile<NT>& t, __m256 (&acc)[NT]) const {
    const BlockQ4_1& x = reinterpret_cast<const BlockQ4_1*>(row)[b];
    const __m256i q = Nibbles32(x.qs);
    __m256i isum[NT];
    for (int k = 0; k < NT; ++k) isum[k] = DotBytes(q, Load32(reinterpret_cast<const BlockQ8_0*>(t.act[k])[b].qs));
    AddBlock(isum, F16ToF32(x.d), t, b, acc);
  }
};

// Q4_K: 8 sub-blocks of 32 with 6-bit scales and mins; the mins meet the
// activations' 16-value sums.
struct Q4_KTiles {
  static constexpr DType kType = DType::Q4_K;
  static constexpr bool kRowMins = false;
  template <int NT>
  HWY_INLINE void Block(const uint8_t* row, int64_t b, const Tile<NT>& t, __m256 (&acc)[NT]) const {
    const BlockQ4_K& x = reinterpret_cast<const BlockQ4_K*>(row)[b];
    int scale[8], min[8];
    for (int s = 0; s < 8; ++s) kquant_scale_min(x.scales, s, scale[s], min[s]);
    __m256i isum[NT];
    for (int k = 0; k < NT; ++k) isum[k] = _mm256_setzero_si256();
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int j = 0; j < 4; ++j) {  // values 64j + l (low nibbles), 64j + 32 + l (high)
      const __m256i q = Load32(x.qs + 32 * j);
      const __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      const __m256i slo = _mm256_set1_epi16(static_cast<int16_t>(scale[2 * j]));
      const __m256i shi = _mm256_set1_epi16(static_cast<int16_t>(scale[2 * j + 1]));
      for (int k = 0; k < NT; ++k) {
        const int8_t* qa = reinterpret_cast<const BlockQ8_K*>(t.act[k])[b].qs + 64 * j;
        isum[k] = _mm256_add_epi32(isum[k], _mm256_add_epi32(DotBytesScaled(lo, Load32(qa), slo),
                                                             DotBytesScaled(hi, Load32(qa + 32), shi)));
      }
    }
    AddBlock(isum, F16ToF32(x.d), t, b, acc);
    // - dmin * da * sum over sub-blocks of min * (the sub-block's activation sum), in lane 0.
    float msum[NT];
    for (int k = 0; k < NT; ++k) {
      const BlockQ8_K& a = reinterpret_cast<const BlockQ8_K*>(t.act[k])[b];
      int m = 0;
      for (int s = 0; s < 8; ++s) m += min[s] * (a.bsums[2 * s] + a.bsums[2 * s + 1]);
      msum[k] = static_cast<float>(m);
    }
    const float neg_dmin = -F16ToF32(x.dmin);
    for (int k = 0; k < NT; ++k) {
      const __m256 mins = _mm256_setr_ps(msum[k], 0, 0, 0, 0, 0, 0, 0);
      acc[k] = _mm256_fmadd_ps(mins, _mm256_set1_ps(neg_dmin * t.scales[k][b]), acc[k]);
    }
  }
};

// Q6_K: 16 groups of 16 with int8 scales; the stored 0..63 is q + 32, and
// the 32 comes off exactly through the activations' 16-value sums.
struct Q6_KTiles {
  static constexpr DType kType = DType::Q6_K;
  static constexpr bool kRowMins = false;
  template <int NT>
  HWY_INLINE void Block(const uint8_t* row, int64_t b, const Tile<NT>& t, __m256 (&acc)[NT]) const {
    const BlockQ6_K& x = reinterpret_cast<const BlockQ6_K*>(row)[b];
    __m256i isum[NT];
    for (int k = 0; k < NT; ++k) isum[k] = _mm256_setzero_si256();
    const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(0x03), bits45 = _mm256_set1_epi8(0x30);
    for (int n = 0; n < 2; ++n) {
      const uint8_t* ql = x.ql + 64 * n;
      const int8_t* sc = x.scales + 8 * n;
      const __m256i v1 = Load32(ql), v2 = Load32(ql + 32), h = Load32(x.qh + 32 * n);
      // Values 128n + l, + 32, + 64, + 96 for l < 32 (blocks.h).
      const __m256i q1 = _mm256_or_si256(_mm256_and_si256(v1, low4), _mm256_slli_epi16(_mm256_and_si256(h, low2), 4));
      const __m256i q2 = _mm256_or_si256(_mm256_and_si256(v2, low4), _mm256_and_si256(_mm256_slli_epi16(h, 2), bits45));
      const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v1, 4), low4), _mm256_and_si256(h, bits45));
      const __m256i q4 =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v2, 4), low4), _mm256_and_si256(_mm256_srli_epi16(h, 2), bits45));
      // Each 32-value vector spans two groups: scale of the first 16 in the low half.
      auto scales = [&](int g) { return _mm256_set_m128i(_mm_set1_epi16(sc[g + 1]), _mm_set1_epi16(sc[g])); };
      const __m256i s1 = scales(0), s2 = scales(2), s3 = scales(4), s4 = scales(6);
      for (int k = 0; k < NT; ++k) {
        const int8_t* qa = reinterpret_cast<const BlockQ8_K*>(t.act[k])[b].qs + 128 * n;
        const __m256i p12 = _mm256_add_epi32(DotBytesScaled(q1, Load32(qa), s1), DotBytesScaled(q2, Load32(qa + 32), s2));
        const __m256i p34 =
            _mm256_add_epi32(DotBytesScaled(q3, Load32(qa + 64), s3), DotBytesScaled(q4, Load32(qa + 96), s4));
        isum[k] = _mm256_add_epi32(isum[k], _mm256_add_epi32(p12, p34));
      }
    }
    for (int k = 0; k < NT; ++k) {
      const BlockQ8_K& a = reinterpret_cast<const BlockQ8_K*>(t.act[k])[b];
      int offset = 0;
      for (int g = 0; g < 16; ++g) offset += x.scales[g] * a.bsums[g];
      isum[k] = _mm256_sub_epi32(isum[k], _mm256_setr_epi32(32 * offset, 0, 0, 0, 0, 0, 0, 0));
    }
    AddBlock(isum, F16ToF32(x.d), t, b, acc);
  }
};

// The lane sum in a fixed order.
HWY_INLINE float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// sum of v[i] * w[i] over n (a multiple of 8) in 8 lanes, then the lanes.
HWY_INLINE float DotFloats(const float* v, const float* w, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(v + i), _mm256_loadu_ps(w + i), acc);
  return HorizontalSum(acc);
}

// Blocks rounded up to whole 8-float vectors (the Q4_1 min dot).
inline int64_t padded_blocks(int64_t nb) { return (nb + 7) / 8 * 8; }

template <class Kernel, int NT>
HWY_INLINE void RowTile(const Kernel& kernel, const uint8_t* row, int64_t nb, const Tile<NT>& t,
                        const float* row_mins, float* y, int64_t y_stride) {
  __m256 even[NT], odd[NT];
  for (int k = 0; k < NT; ++k) even[k] = odd[k] = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    kernel.template Block<NT>(row, b, t, even);
    kernel.template Block<NT>(row, b + 1, t, odd);
  }
  if (b < nb) kernel.template Block<NT>(row, b, t, even);
  for (int k = 0; k < NT; ++k) {
    float value = HorizontalSum(_mm256_add_ps(even[k], odd[k]));
    if constexpr (Kernel::kRowMins) value += DotFloats(row_mins, t.min_terms[k], padded_blocks(nb));
    y[k * y_stride] = value;
  }
}

template <class Kernel>
void KernelRows(const Kernel& kernel, const uint8_t* w, size_t w_row_bytes, int64_t r0, int64_t r1,
                const uint8_t* act, size_t act_row_bytes, int n_tokens, int64_t nb, float* y, int64_t y_stride) {
  // Once per call, not once per row: each token's activation scales as
  // floats, and (Q4_1) its da * sum(qa) per block.
  thread_local std::vector<float> scales, min_terms, row_mins;
  const int64_t nbp = padded_blocks(nb);
  scales.resize(static_cast<size_t>(n_tokens) * nb);
  if (Kernel::kRowMins) {
    min_terms.assign(static_cast<size_t>(n_tokens) * nbp, 0.0f);
    row_mins.assign(static_cast<size_t>(nbp), 0.0f);
  }
  for (int t = 0; t < n_tokens; ++t) {
    const uint8_t* a = act + t * act_row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      float da;
      if constexpr (activation_dtype_of(Kernel::kType) == DType::Q8_K) {
        da = reinterpret_cast<const BlockQ8_K*>(a)[b].d;
      } else {
        const BlockQ8_0& q = reinterpret_cast<const BlockQ8_0*>(a)[b];
        da = F16ToF32(q.d);
        if (Kernel::kRowMins) {
          int s = 0;
          for (int j = 0; j < kQK; ++j) s += q.qs[j];
          min_terms[t * nbp + b] = da * static_cast<float>(s);
        }
      }
      scales[t * nb + b] = da;
    }
  }
  // Rows in groups that stay in cache while every token tile passes them.
  constexpr int64_t kRowGroup = 16;
  for (int64_t g0 = r0; g0 < r1; g0 += kRowGroup) {
    const int64_t g1 = std::min(r1, g0 + kRowGroup);
    for (int t0 = 0; t0 < n_tokens; t0 += kTileTokens) {
      const int nt = std::min(kTileTokens, n_tokens - t0);
      for (int64_t r = g0; r < g1; ++r) {
        const uint8_t* row = w + r * w_row_bytes;
        if constexpr (Kernel::kRowMins)
          for (int64_t b = 0; b < nb; ++b) row_mins[b] = Kernel::Min(row, b);
        float* out = y + t0 * y_stride + r;
        auto run = [&](auto tokens) {
          constexpr int NT = decltype(tokens)::value;
          Tile<NT> t;
          for (int k = 0; k < NT; ++k) {
            t.act[k] = act + (t0 + k) * act_row_bytes;
            t.scales[k] = scales.data() + (t0 + k) * nb;
            t.min_terms[k] = Kernel::kRowMins ? min_terms.data() + (t0 + k) * nbp : nullptr;
          }
          RowTile<Kernel, NT>(kernel, row, nb, t, row_mins.data(), out, y_stride);
        };
        switch (nt) {
          case 4: run(std::integral_constant<int, 4>()); break;
          case 3: run(std::integral_constant<int, 3>()); break;
          case 2: run(std::integral_constant<int, 2>()); break;
          default: run(std::integral_constant<int, 1>()); break;
        }
      }
    }
  }
}
#endif  // x86 AVX2 and up

// True if this target has tiles for `type` (and computed them).
bool GemmRows(DType type, const uint8_t* w, size_t w_row_bytes, int64_t r0, int64_t r1, const uint8_t* act,
              size_t act_row_bytes, int n_tokens, int64_t cols, float* y, int64_t y_stride) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  const int64_t nb32 = cols / kQK, nbk = cols / kQKK;
  switch (type) {
    case DType::Q4_0:
      KernelRows(Q4_0Tiles{}, w, w_row_bytes, r0, r1, act, act_row_bytes, n_tokens, nb32, y, y_stride);
      return true;
    case DType::Q4_1:
      KernelRows(Q4_1Tiles{}, w, w_row_bytes, r0, r1, act, act_row_bytes, n_tokens, nb32, y, y_stride);
      return true;
    case DType::Q5_0:
      KernelRows(Q5_0Tiles{}, w, w_row_bytes, r0, r1, act, act_row_bytes, n_tokens, nb32, y, y_stride);
      return true;
    case DType::Q8_0:
      KernelRows(Q8_0Tiles{}, w, w_row_bytes, r0, r1, act, act_row_bytes, n_tokens, nb32, y, y_stride);
      return true;
    case DType::Q4_K:
      KernelRows(Q4_KTiles{}, w, w_row_bytes, r0, r1, act, act_row_bytes, n_tokens, nbk, y, y_stride);
      return true;
    case DType::Q6_K:
      KernelRows(Q6_KTiles{}, w, w_row_bytes, r0, r1, act, act_row_bytes, n_tokens, nbk, y, y_stride);
      return true;
    default: return false;
  }
#else
  return false;
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace shoal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "tensor/gemm.h"
#include "tensor/vec_dot.h"

namespace shoal {

HWY_EXPORT(GemmRows);

void gemm_rows(DType type, const uint8_t* w, size_t w_row_bytes, int64_t r0, int64_t r1, const uint8_t* act,
               size_t act_row_bytes, int n_tokens, int64_t cols, float* y, int64_t y_stride) {
  if (HWY_DYNAMIC_DISPATCH(GemmRows)(type, w, w_row_bytes, r0, r1, act, act_row_bytes, n_tokens, cols, y, y_stride))
    return;
  for (int64_t r = r0; r < r1; ++r)
    for (int t = 0; t < n_tokens; ++t) y[t * y_stride + r] = vec_dot(type, w + r * w_row_bytes, act + t * act_row_bytes, cols);
}

}  // namespace shoal
#endif  // HWY_ONCE
