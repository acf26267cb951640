// The SwiGLU kernel (see swiglu.h). This translation unit must stay free of
// system and network headers that define short macros (Highway's headers
// break on <termios.h>'s B0).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/swiglu.cpp"
#include <cstring>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace shoal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void SwiGlu(const float* gate, const float* up, float* out, int64_t n) {
  const hn::CappedTag<float, 8> d;
  const size_t N = hn::Lanes(d);
  // exp(-g) overflows float past -g = 88.72 (Highway's Exp is valid only
  // up to 104): there the result is 0, as -g / inf would give, and the
  // true value is under 3e-37 * |up|.
  const auto one = hn::Set(d, 1.0f), limit = hn::Set(d, 88.72f);
  auto silu_times = [&](auto g, auto u) {
    const auto neg = hn::Neg(g);
    const auto y = hn::Mul(hn::Div(g, hn::Add(one, hn::Exp(d, hn::Min(neg, limit)))), u);
    return hn::IfThenZeroElse(hn::Gt(neg, limit), y);
  };
  const size_t count = static_cast<size_t>(n);
  size_t i = 0;
  for (; i + N <= count; i += N) hn::StoreU(silu_times(hn::LoadU(d, gate + i), hn::LoadU(d, up + i)), d, out + i);
  if (i < count) {
    const size_t m = count - i;
    HWY_ALIGN float g[8] = {}, u[8] = {}, y[8];
    std::memcpy(g, gate + i, m * sizeof(float));
    std::memcpy(u, up + i, m * sizeof(float));
    hn::Store(silu_times(hn::Load(d, g), hn::Load(d, u)), d, y);
    std::memcpy(out + i, y, m * sizeof(float));
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace shoal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "tensor/simd_targets.h"
#include "backend/cpu/swiglu.h"

namespace shoal {

// Before this file's first dispatch: see simd_targets.h.
[[maybe_unused]] static const bool kSimdTargetsChecked = drop_unusable_simd_targets();

HWY_EXPORT(SwiGlu);

void cpu_swiglu(const float* gate, const float* up, float* out, int64_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(SwiGlu)(gate, up, out, n);
}

}  // namespace shoal
#endif  // HWY_ONCE
