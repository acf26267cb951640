// vec_dot: one Highway dispatch per call, chosen at run time (SSSE3, SSE4,
// AVX2, AVX-512 on x86; no -march flags needed). The kernels live in the
// vec_dot_*-inl.h files; every supported type has a SIMD kernel.
//
// This translation unit must stay free of system and network headers:
// <termios.h> macros such as B0 break Highway's headers.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tensor/vec_dot.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/vec_dot_common-inl.h"
#include "tensor/vec_dot_float-inl.h"
#include "tensor/vec_dot_kquant-inl.h"
#include "tensor/vec_dot_q32-inl.h"

HWY_BEFORE_NAMESPACE();
namespace shoal {
namespace HWY_NAMESPACE {

// n is a whole number of blocks (checked by the caller).
float VecDot(DType type, const void* weight, const void* activation, int64_t n) {
  const auto* w = static_cast<const uint8_t*>(weight);
  const auto* a8 = static_cast<const BlockQ8_0*>(activation);
  const auto* ak = static_cast<const BlockQ8_K*>(activation);
  const auto* af = static_cast<const float*>(activation);
  const int64_t nb32 = n / kQK, nbk = n / kQKK;
  switch (type) {
    case DType::F32: return DotFloat(F32Weights{w}, af, static_cast<size_t>(n));
    case DType::F16: return DotFloat(F16Weights{w}, af, static_cast<size_t>(n));
    case DType::BF16: return DotFloat(BF16Weights{w}, af, static_cast<size_t>(n));
    case DType::Q8_0: return DotQ32<Q8_0Kernel>(reinterpret_cast<const BlockQ8_0*>(w), a8, nb32);
    case DType::Q4_0: return DotQ32<Qx_0Kernel<BlockQ4_0, false>>(reinterpret_cast<const BlockQ4_0*>(w), a8, nb32);
    case DType::MXFP4: return DotQ32<Mxfp4Kernel>(reinterpret_cast<const BlockMXFP4*>(w), a8, nb32);
    case DType::Q5_0: return DotQ32<Qx_0Kernel<BlockQ5_0, true>>(reinterpret_cast<const BlockQ5_0*>(w), a8, nb32);
    case DType::Q4_1: return DotQ32<Qx_1Kernel<BlockQ4_1, false>>(reinterpret_cast<const BlockQ4_1*>(w), a8, nb32);
    case DType::Q5_1: return DotQ32<Qx_1Kernel<BlockQ5_1, true>>(reinterpret_cast<const BlockQ5_1*>(w), a8, nb32);
    case DType::Q2_K: return DotK<Q2_KKernel>(reinterpret_cast<const BlockQ2_K*>(w), ak, nbk);
    case DType::Q3_K: return DotK<Q3_KKernel>(reinterpret_cast<const BlockQ3_K*>(w), ak, nbk);
    case DType::Q4_K: return DotK<Q45_KKernel<BlockQ4_K, false>>(reinterpret_cast<const BlockQ4_K*>(w), ak, nbk);
    case DType::Q5_K: return DotK<Q45_KKernel<BlockQ5_K, true>>(reinterpret_cast<const BlockQ5_K*>(w), ak, nbk);
    case DType::Q6_K: return DotK<Q6_KKernel>(reinterpret_cast<const BlockQ6_K*>(w), ak, nbk);
    default: return 0.0f;  // rejected by vec_dot before dispatch
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace shoal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "tensor/simd_targets.h"
#include "tensor/vec_dot.h"
#include "util/error.h"

namespace shoal {

// Before this file's first dispatch: see simd_targets.h.
[[maybe_unused]] static const bool kSimdTargetsChecked = drop_unusable_simd_targets();

HWY_EXPORT(VecDot);

float vec_dot(DType weight, const void* weight_row, const void* activation, int64_t n) {
  // Whole blocks of the activation type (1 for float weights).
  const DTypeInfo& info = dtype_info(weight);
  if (!info.weight) fail("vec_dot: weight type {} is not supported", info.name);
  const int block = dtype_info(info.activation).block_size;
  if (n < 0 || n % block != 0)
    fail("vec_dot: {} values is not a whole number of {} blocks", n, dtype_info(weight).name);
  return HWY_DYNAMIC_DISPATCH(VecDot)(weight, weight_row, activation, n);
}

}  // namespace shoal
#endif  // HWY_ONCE
