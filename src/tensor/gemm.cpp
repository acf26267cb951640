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

constexpr int kTileTokens = 4;

constexpr DType activation_dtype_of(DType weight) {
  return weight == DType::Q4_K || weight == DType::Q6_K ? DType::Q8_K : DType::Q8_0;
}

// Up to NT tokens' activations against one row. The accumulators live in
// RowTile's locals (one array for even blocks, one for odd), passed to each
// Block by reference so that they stay in registers.
template <int NT>
struct Tile {
  const uint8_t* act[NT];   // each token's activation row
  const int32_t* sums[NT];  // each token's per-block activation sums (Q4_1), or null
  const float* scales[NT];  // each token's Q8_0 block scales as floats, or null (Q8_K)
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
// x in lane 0, zeros elsewhere: how a per-block scalar term joins a vector sum.
HWY_INLINE __m256 Lane0(float x) { return _mm256_setr_ps(x, 0, 0, 0, 0, 0, 0, 0); }
// acc += isum * scale.
HWY_INLINE __m256 AddScaled(__m256 acc, __m256i isum, float scale) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(scale), acc);
}
// The lane sum in a fixed order.
HWY_INLINE float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
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
  for (int k = 0; k < NT; ++k) {
    const BlockQ8_0& a = reinterpret_cast<const BlockQ8_0*>(t.act[k])[b];
    const __m256i isum = DotBytes(abs_w, _mm256_sign_epi8(Load32(a.qs), w));
    acc[k] = AddScaled(acc[k], isum, dw * t.scales[k][b]);
  }
}

struct Q4_0Tiles {
  static constexpr DType kType = DType::Q4_0;
  static constexpr bool kNeedsSums = false;
  template <int NT>
  HWY_INLINE void Block(const uint8_t* row, int64_t b, const Tile<NT>& t, __m256 (&acc)[NT]) const {
    const BlockQ4_0& x = reinterpret_cast<const BlockQ4_0*>(row)[b];
    SignedBlock(_mm256_sub_epi8(Nibbles32(x.qs), _mm256_set1_epi8(8)), F16ToF32(x.d), b, t, acc);
  }
};

struct Q5_0Tiles {
  static constexpr DType kType = DType::Q5_0;
  static constexpr bool kNeedsSums = false;
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
  static constexpr bool kNeedsSums = false;
  template <int NT>
  HWY_INLINE void Block(const uint8_t* row, int64_t b, const Tile<NT>& t, __m256 (&acc)[NT]) const {
    const BlockQ8_0& x = reinterpret_cast<const BlockQ8_0*>(row)[b];
    SignedBlock(Load32(x.qs), F16ToF32(x.d), b, t, acc);
  }
};

// Q4_1: x = d * q + m, so x . a = d * da * (q . qa) + m * da * sum(qa).
struct Q4_1Tiles {
  static constexpr DType kType = DType::Q4_1;
  static constexpr bool kNeedsSums = true;
  template <int NT>
  HWY_INLINE void Block(const uint8_t* row, int64_t b, const Tile<NT>& t, __m256 (&acc)[NT]) const {
    const BlockQ4_1& x = reinterpret_cast<const BlockQ4_1*>(row)[b];
    const __m256i q = Nibbles32(x.qs);
    const float dw = F16ToF32(x.d), mw = F16ToF32(x.m);
    for (int k = 0; k < NT; ++k) {
      const BlockQ8_0& a = reinterpret_cast<const BlockQ8_0*>(t.act[k])[b];
      const float da = t.scales[k][b];
      const __m256 main = AddScaled(acc[k], DotBytes(q, Load32(a.qs)), dw * da);
      acc[k] = _mm256_fmadd_ps(Lane0(static_cast<float>(t.sums[k][b])), _mm256_set1_ps(mw * da), main);
    }
  }
};

// Q4_K: 8 sub-blocks of 32 with 6-bit scales and mins; the mins meet the
// activations' 16-value sums.
struct Q4_KTiles {
  static constexpr DType kType = DType::Q4_K;
  static constexpr bool kNeedsSums = false;
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
    const float dw = F16ToF32(x.d), dmin = F16ToF32(x.dmin);
    for (int k = 0; k < NT; ++k) {
      const BlockQ8_K& a = reinterpret_cast<const BlockQ8_K*>(t.act[k])[b];
      int msum = 0;
      for (int s = 0; s < 8; ++s) msum += min[s] * (a.bsums[2 * s] + a.bsums[2 * s + 1]);
      const __m256 main = AddScaled(acc[k], isum[k], dw * a.d);
      acc[k] = _mm256_fmadd_ps(Lane0(static_cast<float>(msum)), _mm256_set1_ps(-(dmin * a.d)), main);
    }
  }
};

// Q6_K: 16 groups of 16 with int8 scales; the stored 0..63 is q + 32, and
// the 32 comes off exactly through the activations' 16-value sums.
struct Q6_KTiles {
  static constexpr DType kType = DType::Q6_K;
  static constexpr bool kNeedsSums = false;
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
      auto scales = [&](int g) {
        return _mm256_set_m128i(_mm_set1_epi16(sc[g + 1]), _mm_set1_epi16(sc[g]));
      };
      const __m256i s1 = scales(0), s2 = scales(2), s3 = scales(4), s4 = scales(6);
      for (int k = 0; k < NT; ++k) {
        const int8_t* qa = reinterpret_cast<const BlockQ8_K*>(t.act[k])[b].qs + 128 * n;
        const __m256i p12 = _mm256_add_epi32(DotBytesScaled(q1, Load32(qa), s1), DotBytesScaled(q2, Load32(qa + 32), s2));
        const __m256i p34 =
            _mm256_add_epi32(DotBytesScaled(q3, Load32(qa + 64), s3), DotBytesScaled(q4, Load32(qa + 96), s4));
        isum[k] = _mm256_add_epi32(isum[k], _mm256_add_epi32(p12, p34));
      }
    }
    const float dw = F16ToF32(x.d);
    for (int k = 0; k < NT; ++k) {
      const BlockQ8_K& a = reinterpret_cast<const BlockQ8_K*>(t.act[k])[b];
      int offset = 0;
      for (int g = 0; g < 16; ++g) offset += x.scales[g] * a.bsums[g];
      const __m256i exact = _mm256_sub_epi32(isum[k], _mm256_setr_epi32(32 * offset, 0, 0, 0, 0, 0, 0, 0));
      acc[k] = AddScaled(acc[k], exact, dw * a.d);
    }
  }
};

template <class Kernel, int NT>
HWY_INLINE void RowTile(const Kernel& kernel, const uint8_t* row, int64_t nb, const uint8_t* act,
                        size_t act_row_bytes, const int32_t* sums, const float* scales, float* y,
                        int64_t y_stride) {
  Tile<NT> t;
  __m256 even[NT], odd[NT];
  for (int k = 0; k < NT; ++k) {
    t.act[k] = act + k * act_row_bytes;
    t.sums[k] = sums ? sums + k * nb : nullptr;
    t.scales[k] = scales ? scales + k * nb : nullptr;
    even[k] = odd[k] = _mm256_setzero_ps();
  }
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    kernel.template Block<NT>(row, b, t, even);
    kernel.template Block<NT>(row, b + 1, t, odd);
  }
  if (b < nb) kernel.template Block<NT>(row, b, t, even);
  for (int k = 0; k < NT; ++k) y[k * y_stride] = HorizontalSum(_mm256_add_ps(even[k], odd[k]));
}

template <class Kernel>
void KernelRows(const Kernel& kernel, const uint8_t* w, size_t w_row_bytes, int64_t r0, int64_t r1,
                const uint8_t* act, size_t act_row_bytes, int n_tokens, int64_t nb, float* y, int64_t y_stride) {
  // Per-block activation scales as floats (Q8_0 keeps them in f16) and, for
  // the Q4_1 min term, sums: once per call, not once per row.
  thread_local std::vector<int32_t> sums;
  thread_local std::vector<float> scales;
  constexpr bool kQ8_0 = activation_dtype_of(Kernel::kType) == DType::Q8_0;
  if constexpr (kQ8_0) {
    scales.resize(static_cast<size_t>(n_tokens) * nb);
    if (Kernel::kNeedsSums) sums.resize(static_cast<size_t>(n_tokens) * nb);
    for (int t = 0; t < n_tokens; ++t) {
      const auto* a = reinterpret_cast<const BlockQ8_0*>(act + t * act_row_bytes);
      for (int64_t b = 0; b < nb; ++b) {
        scales[t * nb + b] = F16ToF32(a[b].d);
        if (!Kernel::kNeedsSums) continue;
        int s = 0;
        for (int j = 0; j < kQK; ++j) s += a[b].qs[j];
        sums[t * nb + b] = s;
      }
    }
  }
  // Rows in groups that stay in cache while every token tile passes them.
  constexpr int64_t kRowGroup = 16;
  for (int64_t g0 = r0; g0 < r1; g0 += kRowGroup) {
    const int64_t g1 = std::min(r1, g0 + kRowGroup);
    for (int t0 = 0; t0 < n_tokens; t0 += kTileTokens) {
      const int nt = std::min(kTileTokens, n_tokens - t0);
      const uint8_t* a = act + t0 * act_row_bytes;
      const int32_t* s = Kernel::kNeedsSums ? sums.data() + t0 * nb : nullptr;
      const float* sc = kQ8_0 ? scales.data() + t0 * nb : nullptr;
      for (int64_t r = g0; r < g1; ++r) {
        const uint8_t* row = w + r * w_row_bytes;
        float* out = y + t0 * y_stride + r;
        switch (nt) {
          case 4: RowTile<Kernel, 4>(kernel, row, nb, a, act_row_bytes, s, sc, out, y_stride); break;
          case 3: RowTile<Kernel, 3>(kernel, row, nb, a, act_row_bytes, s, sc, out, y_stride); break;
          case 2: RowTile<Kernel, 2>(kernel, row, nb, a, act_row_bytes, s, sc, out, y_stride); break;
          default: RowTile<Kernel, 1>(kernel, row, nb, a, act_row_bytes, s, sc, out, y_stride); break;
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
