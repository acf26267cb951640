// SIMD dot kernels for the K-quants (Q2_K .. Q6_K) against Q8_K activations.
// Per 256-value super-block: each group of 16 values is unpacked to int16
// lanes, multiplied by its small integer scale (still int16: at most
// |-32 * -128| = 4096), dotted with the activation quants into int32 lanes
// (at most 256 * 4096 * 128 = 2^27 in total, no overflow); then one float
// multiply-add by d_w * d_a. The min terms of Q2_K/Q4_K/Q5_K come from the
// activation's 16-value sums (bsums): an exact integer per block, added to
// lane 0 with the scale -dmin * d_a.
#if defined(SHOAL_TENSOR_VEC_DOT_KQUANT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SHOAL_TENSOR_VEC_DOT_KQUANT_INL_H_
#undef SHOAL_TENSOR_VEC_DOT_KQUANT_INL_H_
#else
#define SHOAL_TENSOR_VEC_DOT_KQUANT_INL_H_
#endif

#include "hwy/highway.h"
#include "tensor/blocks.h"
#include "tensor/vec_dot_common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace shoal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

struct Q2_KKernel {
  const BlockQ2_K* HWY_RESTRICT w;
  const BlockQ8_K* HWY_RESTRICT a;

  HWY_INLINE VF Block(int64_t i, VF acc) {
    const D16 d16;
    const size_t N = hn::Lanes(d16);
    const V16 low2 = hn::Set(d16, 3);
    V32 s0 = hn::Zero(D32()), s1 = hn::Zero(D32());
    for (int n = 0; n < 2; ++n) {
      for (size_t l = 0; l < 32; l += N) {
        const V16 q = LoadU8(w[i].qs + 32 * n + l);
        for (int j = 0; j < 4; ++j) {  // value 128n + 32j + l, group 8n + 2j + l/16
          const int scale = w[i].scales[8 * n + 2 * j + l / 16] & 0xF;
          const V16 v = hn::Mul(hn::And(hn::ShiftRightSame(q, 2 * j), low2), hn::Set(d16, scale));
          s0 = DotAcc(v, LoadI8(a[i].qs + 128 * n + 32 * j + l), s0, s1);
        }
      }
    }
    int msum = 0;
    for (int g = 0; g < 16; ++g) msum += (w[i].scales[g] >> 4) * a[i].bsums[g];
    acc = AddToLane0(acc, -(a[i].d * F16ToF32(w[i].dmin)), static_cast<float>(msum));
    return hn::MulAdd(hn::Set(DF(), a[i].d * F16ToF32(w[i].d)), FloatSum(s0, s1), acc);
  }
};

struct Q3_KKernel {
  const BlockQ3_K* HWY_RESTRICT w;
  const BlockQ8_K* HWY_RESTRICT a;

  HWY_INLINE VF Block(int64_t i, VF acc) {
    const D16 d16;
    const size_t N = hn::Lanes(d16);
    const V16 one = hn::Set(d16, 1), low2 = hn::Set(d16, 3), four = hn::Set(d16, 4);
    int scales[16];
    for (int g = 0; g < 16; ++g) scales[g] = q3k_scale(w[i].scales, g);
    V32 s0 = hn::Zero(D32()), s1 = hn::Zero(D32());
    for (size_t l = 0; l < 32; l += N) {
      const V16 hm = LoadU8(w[i].hmask + l);
      for (int n = 0; n < 2; ++n) {
        const V16 q = LoadU8(w[i].qs + 32 * n + l);
        for (int j = 0; j < 4; ++j) {  // value 128n + 32j + l
          const V16 low = hn::And(hn::ShiftRightSame(q, 2 * j), low2);
          const V16 high = hn::And(hn::ShiftRightSame(hm, 4 * n + j), one);
          // low - 4 without the high bit: low + 4 * high - 4, in [-4, 3].
          const V16 v = hn::Sub(hn::Add(low, hn::ShiftLeft<2>(high)), four);
          const V16 scaled = hn::Mul(v, hn::Set(d16, scales[8 * n + 2 * j + l / 16]));
          s0 = DotAcc(scaled, LoadI8(a[i].qs + 128 * n + 32 * j + l), s0, s1);
        }
      }
    }
    return hn::MulAdd(hn::Set(DF(), a[i].d * F16ToF32(w[i].d)), FloatSum(s0, s1), acc);
  }
};

// Q4_K and Q5_K: 8 sub-blocks of 32 values, each with a 6-bit scale and min.
template <class BlockT, bool kFifthBit>
struct Q45_KKernel {
  const BlockT* HWY_RESTRICT w;
  const BlockQ8_K* HWY_RESTRICT a;

  HWY_INLINE VF Block(int64_t i, VF acc) {
    const D16 d16;
    const size_t N = hn::Lanes(d16);
    const V16 low4 = hn::Set(d16, 15), one = hn::Set(d16, 1);
    int scale[8], min[8], msum = 0;
    for (int s = 0; s < 8; ++s) {
      kquant_scale_min(w[i].scales, s, scale[s], min[s]);
      msum += min[s] * (a[i].bsums[2 * s] + a[i].bsums[2 * s + 1]);
    }
    V32 s0 = hn::Zero(D32()), s1 = hn::Zero(D32());
    for (size_t l = 0; l < 32; l += N) {
      V16 qh = hn::Zero(d16);
      if constexpr (kFifthBit) qh = LoadU8(w[i].qh + l);
      for (int j = 0; j < 4; ++j) {  // values 64j + l (low nibble), 64j + 32 + l (high)
        const V16 q = LoadU8(w[i].qs + 32 * j + l);
        V16 lo = hn::And(q, low4), hi = hn::ShiftRight<4>(q);
        if constexpr (kFifthBit) {
          lo = hn::Or(lo, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(qh, 2 * j), one)));
          hi = hn::Or(hi, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(qh, 2 * j + 1), one)));
        }
        lo = hn::Mul(lo, hn::Set(d16, scale[2 * j]));
        hi = hn::Mul(hi, hn::Set(d16, scale[2 * j + 1]));
        s0 = DotAcc(lo, LoadI8(a[i].qs + 64 * j + l), s0, s1);
        s0 = DotAcc(hi, LoadI8(a[i].qs + 64 * j + 32 + l), s0, s1);
      }
    }
    acc = AddToLane0(acc, -(a[i].d * F16ToF32(w[i].dmin)), static_cast<float>(msum));
    return hn::MulAdd(hn::Set(DF(), a[i].d * F16ToF32(w[i].d)), FloatSum(s0, s1), acc);
  }
};

struct Q6_KKernel {
  const BlockQ6_K* HWY_RESTRICT w;
  const BlockQ8_K* HWY_RESTRICT a;

  HWY_INLINE VF Block(int64_t i, VF acc) {
    const D16 d16;
    const size_t N = hn::Lanes(d16);
    const V16 low4 = hn::Set(d16, 15), low2 = hn::Set(d16, 3), bias = hn::Set(d16, 32);
    V32 s0 = hn::Zero(D32()), s1 = hn::Zero(D32());
    for (int n = 0; n < 2; ++n) {
      const uint8_t* ql = w[i].ql + 64 * n;
      const uint8_t* qh = w[i].qh + 32 * n;
      const int8_t* sc = w[i].scales + 8 * n;
      const int8_t* qa = a[i].qs + 128 * n;
      for (size_t l = 0; l < 32; l += N) {
        const size_t g = l / 16;
        const V16 v1 = LoadU8(ql + l), v2 = LoadU8(ql + 32 + l), h = LoadU8(qh + l);
        const V16 q1 = hn::Or(hn::And(v1, low4), hn::ShiftLeft<4>(hn::And(h, low2)));
        const V16 q2 = hn::Or(hn::And(v2, low4), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<2>(h), low2)));
        const V16 q3 = hn::Or(hn::ShiftRight<4>(v1), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<4>(h), low2)));
        const V16 q4 = hn::Or(hn::ShiftRight<4>(v2), hn::ShiftLeft<4>(hn::ShiftRight<6>(h)));
        s0 = DotAcc(hn::Mul(hn::Sub(q1, bias), hn::Set(d16, sc[g])), LoadI8(qa + l), s0, s1);
        s0 = DotAcc(hn::Mul(hn::Sub(q2, bias), hn::Set(d16, sc[g + 2])), LoadI8(qa + 32 + l), s0, s1);
        s0 = DotAcc(hn::Mul(hn::Sub(q3, bias), hn::Set(d16, sc[g + 4])), LoadI8(qa + 64 + l), s0, s1);
        s0 = DotAcc(hn::Mul(hn::Sub(q4, bias), hn::Set(d16, sc[g + 6])), LoadI8(qa + 96 + l), s0, s1);
      }
    }
    return hn::MulAdd(hn::Set(DF(), a[i].d * F16ToF32(w[i].d)), FloatSum(s0, s1), acc);
  }
};

template <class Kernel, class BlockT>
float DotK(const BlockT* HWY_RESTRICT w, const BlockQ8_K* HWY_RESTRICT a, int64_t nb) {
  Kernel kernel{w, a};
  return SumBlocks(kernel, nb);
}

}  // namespace HWY_NAMESPACE
}  // namespace shoal
HWY_AFTER_NAMESPACE();

#endif  // include guard
