// Activation rows to the 8-bit formats the quantized weights pair with
// (Q8_0 for the 32-blocks, Q8_K for the K-quants). Runs once per activation
// row per matmul, so it is SIMD (Highway, dispatched at run time) and
// allocates nothing. It produces the same bytes as quantize_row_reference on
// every target: max-abs, one division, exact products, round-to-nearest-even.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tensor/quantize_activation.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "tensor/blocks.h"
#include "tensor/dequantize.h"

HWY_BEFORE_NAMESPACE();
namespace shoal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// max |x[j]| for j < n; n is a multiple of Lanes(d).
template <class D>
HWY_INLINE float AbsMax(D d, const float* HWY_RESTRICT x, size_t n) {
  auto m = hn::Zero(d);
  for (size_t j = 0; j < n; j += hn::Lanes(d)) m = hn::Max(m, hn::Abs(hn::LoadU(d, x + j)));
  return hn::GetLane(hn::MaxOfLanes(d, m));
}

// nb blocks of 32 floats -> nb BlockQ8_0.
void QuantizeQ8_0(const float* HWY_RESTRICT x, void* HWY_RESTRICT dst, int64_t nb) {
  const hn::CappedTag<float, kQK> df;  // a block is a whole number of vectors
  const hn::Rebind<int8_t, decltype(df)> d8;
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < nb; ++i, ++y, x += kQK) {
    const float amax = AbsMax(df, x, kQK);
    y->d = f32_to_f16(amax / 127.0f);
    const auto id = hn::Set(df, amax != 0.0f ? 127.0f / amax : 0.0f);
    for (size_t j = 0; j < kQK; j += hn::Lanes(df)) {
      const auto q = hn::NearestInt(hn::Mul(hn::LoadU(df, x + j), id));  // |q| <= 127
      hn::StoreU(hn::DemoteTo(d8, q), d8, y->qs + j);
    }
  }
}

// nb blocks of 256 floats -> nb BlockQ8_K (with the 16-value sums).
void QuantizeQ8_K(const float* HWY_RESTRICT x, void* HWY_RESTRICT dst, int64_t nb) {
  const hn::CappedTag<float, 16> df;  // a 16-group is a whole number of vectors
  const hn::Rebind<int32_t, decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const size_t N = hn::Lanes(df);
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < nb; ++i, ++y, x += kQKK) {
    const float amax = AbsMax(df, x, kQKK);
    if (amax == 0.0f) {
      std::memset(y, 0, sizeof(*y));
      continue;
    }
    const float iscale = 127.0f / amax;
    const auto vscale = hn::Set(df, iscale);
    const auto max_q = hn::Set(di, 127);
    for (size_t g = 0; g < kQKK / 16; ++g) {
      auto sum = hn::Zero(di);
      for (size_t j = 16 * g; j < 16 * g + 16; j += N) {
        const auto q = hn::Min(hn::NearestInt(hn::Mul(hn::LoadU(df, x + j), vscale)), max_q);
        sum = hn::Add(sum, q);
        hn::StoreU(hn::DemoteTo(d8, q), d8, y->qs + j);
      }
      y->bsums[g] = static_cast<int16_t>(hn::GetLane(hn::SumOfLanes(di, sum)));
    }
    y->d = 1.0f / iscale;
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

HWY_EXPORT(QuantizeQ8_0);
HWY_EXPORT(QuantizeQ8_K);

DType activation_dtype(DType weight) {
  const DTypeInfo& info = dtype_info(weight);
  if (!info.weight) fail("no matmul kernel for weight type {}", info.name);
  return info.activation;
}

void quantize_activation(DType weight, const float* src, void* dst, int64_t n) {
  const DType act = activation_dtype(weight);
  const int block = dtype_info(act).block_size;
  if (n < 0 || n % block != 0)
    fail("quantize_activation: {} values is not a whole number of {} blocks", n, dtype_info(act).name);
  switch (act) {
    case DType::F32:
      if (dst != src) std::memmove(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::Q8_0: HWY_DYNAMIC_DISPATCH(QuantizeQ8_0)(src, dst, n / kQK); return;
    default: HWY_DYNAMIC_DISPATCH(QuantizeQ8_K)(src, dst, n / kQKK); return;
  }
}

}  // namespace shoal
#endif  // HWY_ONCE
