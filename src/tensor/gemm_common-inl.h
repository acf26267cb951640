// Pieces shared by the matmul tiles (gemm.cpp): prefetching, compile-time
// tile counts, and the AVX-512 helpers that treat a 512-bit register as two
// of the AVX2 kernels' 8-lane vectors.
#if defined(SHOAL_TENSOR_GEMM_COMMON_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SHOAL_TENSOR_GEMM_COMMON_INL_H_
#undef SHOAL_TENSOR_GEMM_COMMON_INL_H_
#else
#define SHOAL_TENSOR_GEMM_COMMON_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#if HWY_ARCH_X86
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace shoal {
namespace HWY_NAMESPACE {

// Fetches [p, p + bytes) into cache ahead of its use, a line at a time.
HWY_INLINE void PrefetchSpan(const uint8_t* p, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) hwy::Prefetch(p + o);
}

// Grouped rows (quantized or float) are one sequential stream, yet the
// hardware prefetcher of the machine measured (a Zen 3 guest) falls behind
// it: the first pass over a group fetches 2 KiB ahead itself (decode
// +15-20%, docs/benchmarks/2026-12-01-cpu-kernels.md). Two groups at once
// are two streams, and each needs
// it (four tokens on weights streamed from memory, Zen 5: 8-18 GB/s with
// only the second fetched ahead, 19-25 with both). 4 KiB rather than 2:
// Zen 5 decodes 10-20 % faster on one thread with it; on Zen 3, 4 and 8
// KiB measured the same as 2.
constexpr size_t kGroupAhead = 4096;

// Calls fn(std::integral_constant<int, K>) for K = n (1..kMax): a tile's
// token (or row) count as a compile-time constant.
template <int kMax = 4, class Fn>
HWY_INLINE void WithCount(int n, Fn&& fn) {
  if constexpr (kMax == 1) {
    fn(std::integral_constant<int, 1>());
  } else if (n == kMax) {
    fn(std::integral_constant<int, kMax>());
  } else {
    WithCount<kMax - 1>(n, fn);
  }
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// AVX-512 kernels hold two 8-lane vectors of the AVX2 kernels in one
// register (two float rows, or two groups of eight quantized rows), each
// half doing exactly the AVX2 arithmetic. The zero-masked intrinsics with every lane kept are the plain
// instructions: GCC 12's unmasked ones start from an "undefined" register
// that -Wmaybe-uninitialized reports.
constexpr __mmask16 kLanes16 = 0xFFFF;
constexpr __mmask8 kLanes8 = 0xFF;
constexpr __mmask32 kLanes32 = 0xFFFFFFFFu;
HWY_INLINE __m256 Half8(__m512 v, int upper) {
  return upper ? _mm512_maskz_extractf32x8_ps(kLanes8, v, 1) : _mm512_maskz_extractf32x8_ps(kLanes8, v, 0);
}
HWY_INLINE __m512 Twice(__m256 v) { return _mm512_maskz_broadcast_f32x8(kLanes16, v); }
HWY_INLINE __m512 ToFloats(__m512i v) { return _mm512_maskz_cvtepi32_ps(kLanes16, v); }
HWY_INLINE __m512 Join8(__m256 lo, __m256 hi) { return _mm512_maskz_insertf32x8(kLanes16, _mm512_castps256_ps512(lo), hi, 1); }
#endif

}  // namespace HWY_NAMESPACE
}  // namespace shoal
HWY_AFTER_NAMESPACE();

#endif  // include guard
