// SIMD dot kernels for the 32-value block types (Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0) against Q8_0 activations. Per block: the 32 weight quants are
// unpacked to int16 lanes, multiplied with the activation quants and summed
// exactly in int32 lanes; then one multiply-add by d_w * d_a (and, for the
// *_1 types, one by m_w * d_a with the activation quants' sum).
#if defined(SHOAL_TENSOR_VEC_DOT_Q32_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SHOAL_TENSOR_VEC_DOT_Q32_INL_H_
#undef SHOAL_TENSOR_VEC_DOT_Q32_INL_H_
#else
#define SHOAL_TENSOR_VEC_DOT_Q32_INL_H_
#endif

#include "hwy/highway.h"
#include "tensor/blocks.h"
#include "tensor/vec_dot_common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace shoal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Bit k of lane k, for testing bits of Q5's qh one per lane.
HWY_INLINE V16 LaneBits() {
  alignas(32) static constexpr int16_t kBits[16] = {
      1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, -32768};
  return hn::Load(D16(), kBits);
}

// 16 where bit (lane) of `bits` is set, else 0: the fifth bit of Q5 values.
HWY_INLINE V16 FifthBit(uint32_t bits, V16 lane_bits) {
  const D16 d16;
  const auto set = hn::TestBit(hn::Set(d16, static_cast<int16_t>(bits & 0xFFFF)), lane_bits);
  return hn::IfThenElseZero(set, hn::Set(d16, 16));
}

struct Q8_0Kernel {
  const BlockQ8_0* HWY_RESTRICT w;
  const BlockQ8_0* HWY_RESTRICT a;

  HWY_INLINE VF Block(int64_t i, VF acc) const {
    const size_t N = hn::Lanes(D16());
    V32 s0 = hn::Zero(D32()), s1 = hn::Zero(D32());
    for (size_t j = 0; j < kQK; j += N) s0 = DotAcc(LoadI8(w[i].qs + j), LoadI8(a[i].qs + j), s0, s1);
    const float scale = F16ToF32(w[i].d) * F16ToF32(a[i].d);
    return hn::MulAdd(hn::Set(DF(), scale), FloatSum(s0, s1), acc);
  }
};

// Q4_0 (kFifthBit = false, offset 8) and Q5_0 (true, offset 16).
template <class BlockT, bool kFifthBit>
struct Qx_0Kernel {
  const BlockT* HWY_RESTRICT w;
  const BlockQ8_0* HWY_RESTRICT a;

  HWY_INLINE VF Block(int64_t i, VF acc) const {
    const D16 d16;
    const size_t N = hn::Lanes(d16);
    const V16 low4 = hn::Set(d16, 15), offset = hn::Set(d16, kFifthBit ? 16 : 8);
    uint32_t qh = 0;
    if constexpr (kFifthBit) qh = load_u32_le(w[i].qh);
    V32 s0 = hn::Zero(D32()), s1 = hn::Zero(D32());
    for (size_t j = 0; j < kQK / 2; j += N) {
      const V16 q = LoadU8(w[i].qs + j);
      V16 lo = hn::And(q, low4), hi = hn::ShiftRight<4>(q);  // values j.., 16 + j..
      if constexpr (kFifthBit) {
        const V16 lane_bits = LaneBits();
        lo = hn::Or(lo, FifthBit(qh >> j, lane_bits));
        hi = hn::Or(hi, FifthBit(qh >> (16 + j), lane_bits));
      }
      s0 = DotAcc(hn::Sub(lo, offset), LoadI8(a[i].qs + j), s0, s1);
      s0 = DotAcc(hn::Sub(hi, offset), LoadI8(a[i].qs + kQK / 2 + j), s0, s1);
    }
    const float scale = F16ToF32(w[i].d) * F16ToF32(a[i].d);
    return hn::MulAdd(hn::Set(DF(), scale), FloatSum(s0, s1), acc);
  }
};

// MXFP4: each nibble looked up as its doubled E2M1 value (an int8), then the
// same exact int8 products as Q4_0, scaled by 2^(e - 128) * da.
struct Mxfp4Kernel {
  const BlockMXFP4* HWY_RESTRICT w;
  const BlockQ8_0* HWY_RESTRICT a;

  HWY_INLINE VF Block(int64_t i, VF acc) const {
    const size_t N = hn::Lanes(D16());
    HWY_ALIGN int8_t values[kQK];
#if HWY_TARGET == HWY_SCALAR
    for (int j = 0; j < kQK / 2; ++j) {
      values[j] = kMxfp4Values[w[i].qs[j] & 0xF];
      values[j + kQK / 2] = kMxfp4Values[w[i].qs[j] >> 4];
    }
#else
    // The 16 nibble values as a byte table: one shuffle looks up 16 nibbles.
    const hn::Full128<uint8_t> d8;
    const auto table = hn::LoadU(d8, reinterpret_cast<const uint8_t*>(kMxfp4Values));
    const auto q = hn::LoadU(d8, w[i].qs);
    hn::Store(hn::TableLookupBytes(table, hn::And(q, hn::Set(d8, 0x0F))), d8, reinterpret_cast<uint8_t*>(values));
    hn::Store(hn::TableLookupBytes(table, hn::ShiftRight<4>(q)), d8, reinterpret_cast<uint8_t*>(values + kQK / 2));
#endif
    V32 s0 = hn::Zero(D32()), s1 = hn::Zero(D32());
    for (size_t j = 0; j < kQK; j += N) s0 = DotAcc(LoadI8(values + j), LoadI8(a[i].qs + j), s0, s1);
    const float scale = e8m0_half(w[i].e) * F16ToF32(a[i].d);
    return hn::MulAdd(hn::Set(DF(), scale), FloatSum(s0, s1), acc);
  }
};

// Q4_1 and Q5_1: sum x*a = d*da * sum(q*qa) + m*da * sum(qa).
template <class BlockT, bool kFifthBit>
struct Qx_1Kernel {
  const BlockT* HWY_RESTRICT w;
  const BlockQ8_0* HWY_RESTRICT a;

  HWY_INLINE VF Block(int64_t i, VF acc) const {
    const D16 d16;
    const size_t N = hn::Lanes(d16);
    const V16 low4 = hn::Set(d16, 15), one = hn::Set(d16, 1);
    uint32_t qh = 0;
    if constexpr (kFifthBit) qh = load_u32_le(w[i].qh);
    V32 s0 = hn::Zero(D32()), s1 = hn::Zero(D32());  // sum q * qa
    V32 t0 = hn::Zero(D32()), t1 = hn::Zero(D32());  // sum qa
    for (size_t j = 0; j < kQK / 2; j += N) {
      const V16 q = LoadU8(w[i].qs + j);
      V16 lo = hn::And(q, low4), hi = hn::ShiftRight<4>(q);
      if constexpr (kFifthBit) {
        const V16 lane_bits = LaneBits();
        lo = hn::Or(lo, FifthBit(qh >> j, lane_bits));
        hi = hn::Or(hi, FifthBit(qh >> (16 + j), lane_bits));
      }
      const V16 alo = LoadI8(a[i].qs + j), ahi = LoadI8(a[i].qs + kQK / 2 + j);
      s0 = DotAcc(lo, alo, s0, s1);
      s0 = DotAcc(hi, ahi, s0, s1);
      t0 = DotAcc(hn::Add(alo, ahi), one, t0, t1);  // |alo + ahi| <= 256 fits int16
    }
    const float da = F16ToF32(a[i].d);
    acc = hn::MulAdd(hn::Set(DF(), F16ToF32(w[i].d) * da), FloatSum(s0, s1), acc);
    return hn::MulAdd(hn::Set(DF(), F16ToF32(w[i].m) * da), FloatSum(t0, t1), acc);
  }
};

template <class Kernel, class BlockT>
float DotQ32(const BlockT* HWY_RESTRICT w, const BlockQ8_0* HWY_RESTRICT a, int64_t nb) {
  Kernel kernel{w, a};
  return SumBlocks(kernel, nb);
}

}  // namespace HWY_NAMESPACE
}  // namespace shoal
HWY_AFTER_NAMESPACE();

#endif  // include guard
