// SIMD dot kernels for float weights (F32, F16, BF16) against f32
// activations: four accumulators of 8 lanes; a last partial vector is copied
// into a zero-padded buffer and goes through the same vector multiply-add.
// Capped at 8 lanes so AVX2 and AVX-512 machines compute the same bits (as
// the quantized kernels do); the cached-row throughput this gives up is far
// above memory bandwidth. No scalar float arithmetic here: the compiler may
// contract a scalar a*b+c into an FMA differently per target.
#if defined(SHOAL_TENSOR_VEC_DOT_FLOAT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SHOAL_TENSOR_VEC_DOT_FLOAT_INL_H_
#undef SHOAL_TENSOR_VEC_DOT_FLOAT_INL_H_
#else
#define SHOAL_TENSOR_VEC_DOT_FLOAT_INL_H_
#endif

#include <cstring>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace shoal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// How to read Lanes(d) weights starting at element i (the row may sit at
// any address: loads are unaligned).
struct F32Weights {
  static constexpr size_t kBytes = 4;
  const uint8_t* p;
  template <class D>
  HWY_INLINE hn::Vec<D> Load(D d, size_t i) const {
    return hn::LoadU(d, reinterpret_cast<const float*>(p + 4 * i));
  }
};

struct F16Weights {
  static constexpr size_t kBytes = 2;
  const uint8_t* p;
  template <class D>
  HWY_INLINE hn::Vec<D> Load(D d, size_t i) const {
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p + 2 * i)));
  }
};

struct BF16Weights {
  static constexpr size_t kBytes = 2;
  const uint8_t* p;
  template <class D>
  HWY_INLINE hn::Vec<D> Load(D d, size_t i) const {
    // bf16 is the top half of an f32: widen to u32 and shift.
    const hn::Rebind<uint16_t, D> du16;
    const hn::RebindToUnsigned<D> du32;
    const auto bits = hn::LoadU(du16, reinterpret_cast<const uint16_t*>(p + 2 * i));
    return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du32, bits)));
  }
};

template <class Weights>
HWY_INLINE float DotFloat(Weights w, const float* HWY_RESTRICT a, size_t n) {
  const hn::CappedTag<float, 8> d;
  const size_t N = hn::Lanes(d);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    s0 = hn::MulAdd(w.Load(d, i), hn::LoadU(d, a + i), s0);
    s1 = hn::MulAdd(w.Load(d, i + N), hn::LoadU(d, a + i + N), s1);
    s2 = hn::MulAdd(w.Load(d, i + 2 * N), hn::LoadU(d, a + i + 2 * N), s2);
    s3 = hn::MulAdd(w.Load(d, i + 3 * N), hn::LoadU(d, a + i + 3 * N), s3);
  }
  for (; i + N <= n; i += N) s0 = hn::MulAdd(w.Load(d, i), hn::LoadU(d, a + i), s0);
  if (i < n) {
    HWY_ALIGN uint8_t w_tail[8 * Weights::kBytes] = {};
    HWY_ALIGN float a_tail[8] = {};
    std::memcpy(w_tail, w.p + i * Weights::kBytes, (n - i) * Weights::kBytes);
    std::memcpy(a_tail, a + i, (n - i) * sizeof(float));
    s0 = hn::MulAdd(Weights{w_tail}.Load(d, 0), hn::LoadU(d, a_tail), s0);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
}

}  // namespace HWY_NAMESPACE
}  // namespace shoal
HWY_AFTER_NAMESPACE();

#endif  // include guard
