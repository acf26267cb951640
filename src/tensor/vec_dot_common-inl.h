// Helpers shared by the SIMD dot kernels (included once per Highway target
// from vec_dot.cpp).
//
// Quantized kernels work on int16 lanes: weights are unpacked to int16,
// activations sign-extended from int8, and ReorderWidenMulAccumulate
// (vpmaddwd on x86) sums adjacent products into int32 lanes, exactly. A block
// ends with one float multiply-add of its int32 lanes by the block's scale.
// A vector never holds more than 16 values (CappedTag), so every 16-value
// group of a block is a whole number of vectors on every target. AVX-512
// thus runs 256-bit vectors, with the same lane grouping as AVX2: both
// targets compute the same bits (a test checks it), so AVX2 and AVX-512
// machines agree in a distributed run. SSE4/SSSE3 (4 float lanes, no FMA)
// differ from them in the last bits.
#if defined(SHOAL_TENSOR_VEC_DOT_COMMON_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SHOAL_TENSOR_VEC_DOT_COMMON_INL_H_
#undef SHOAL_TENSOR_VEC_DOT_COMMON_INL_H_
#else
#define SHOAL_TENSOR_VEC_DOT_COMMON_INL_H_
#endif

#include "hwy/highway.h"
#include "tensor/blocks.h"

HWY_BEFORE_NAMESPACE();
namespace shoal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D16 = hn::CappedTag<int16_t, 16>;  // quant values, at most 16 per vector
using D32 = hn::Repartition<int32_t, D16>;
using DF = hn::Repartition<float, D16>;
using V16 = hn::Vec<D16>;
using V32 = hn::Vec<D32>;
using VF = hn::Vec<DF>;

// Lanes(D16) values of int8 at p, sign-extended.
HWY_INLINE V16 LoadI8(const int8_t* HWY_RESTRICT p) {
  const D16 d16;
  const hn::Rebind<int8_t, D16> d8;
  return hn::PromoteTo(d16, hn::LoadU(d8, p));
}

// Lanes(D16) bytes at p, zero-extended.
HWY_INLINE V16 LoadU8(const uint8_t* HWY_RESTRICT p) {
  const D16 d16;
  const hn::Rebind<uint8_t, D16> d8;
  return hn::BitCast(d16, hn::PromoteTo(hn::RebindToUnsigned<D16>(), hn::LoadU(d8, p)));
}

// s0 += pairwise products w * a, exactly in int32 lanes. The lane order is
// unspecified and some targets also accumulate into s1; FloatSum combines
// them. (Plain functions, no struct of vectors: SVE vectors are sizeless.)
HWY_INLINE V32 DotAcc(V16 w, V16 a, V32 s0, V32& s1) {
  return hn::ReorderWidenMulAccumulate(D32(), w, a, s0, s1);
}
HWY_INLINE VF FloatSum(V32 s0, V32 s1) { return hn::ConvertTo(DF(), hn::RearrangeToOddPlusEven(s0, s1)); }

// IEEE half -> float: F16C on x86 targets that have it, else exact scalar
// code (Highway's software fallback does not keep inf/NaN).
HWY_INLINE float F16ToF32(uint16_t h) {
#if HWY_ARCH_X86 && HWY_TARGET < HWY_SSE4 && !defined(HWY_DISABLE_F16C)
  const hn::CappedTag<float, 1> df1;
  const hn::Rebind<hwy::float16_t, decltype(df1)> dh1;
  const hn::Rebind<uint16_t, decltype(df1)> du1;
  return hn::GetLane(hn::PromoteTo(df1, hn::BitCast(dh1, hn::Set(du1, h))));
#else
  return half_to_float(h);
#endif
}

// acc with value added to lane 0 only: how a per-block scalar term (the
// K-quants' mins) joins the vector sum without scalar float arithmetic, which
// the compiler might contract into an FMA on one target and not another.
HWY_INLINE VF AddToLane0(VF acc, float scale, float value) {
  const DF df;
  const VF v = hn::IfThenElseZero(hn::FirstN(df, 1), hn::Set(df, value));
  return hn::MulAdd(hn::Set(df, scale), v, acc);
}

// Runs acc = kernel.Block(i, acc) over blocks i < nb into two accumulators
// (even and odd blocks, to hide the multiply-add latency) and returns their
// lane sum. The grouping is fixed, so the result depends only on the inputs.
// Kernels are structs with an HWY_INLINE Block(): a lambda would not be
// inlined here, costing a call per block.
template <class Kernel>
HWY_INLINE float SumBlocks(Kernel& kernel, int64_t nb) {
  const DF df;
  VF acc0 = hn::Zero(df), acc1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 1 < nb; i += 2) {
    acc0 = kernel.Block(i, acc0);
    acc1 = kernel.Block(i + 1, acc1);
  }
  if (i < nb) acc0 = kernel.Block(i, acc0);
  return hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1)));
}

}  // namespace HWY_NAMESPACE
}  // namespace shoal
HWY_AFTER_NAMESPACE();

#endif  // include guard
