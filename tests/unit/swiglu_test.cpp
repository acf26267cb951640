// The CPU SwiGLU kernel against a double-precision reference, and its
// determinism: the same bits whatever stretch of the row a call covers and
// on every SIMD target with fused multiply-add.
#include "backend/cpu/swiglu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "hwy/targets.h"
#include "target_guard.h"

namespace shoal {
namespace {

// Gates over the whole range a model produces and past exp's overflow.
std::vector<float> gates(size_t n) {
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> wide(-20.0f, 20.0f);
  std::vector<float> g(n);
  for (auto& x : g) x = wide(rng);
  const float edges[] = {0.0f, -0.0f, 1e-6f, -1e-6f, -87.9f, -88.5f, -100.0f, -1e30f, 88.5f, 100.0f, 1e30f};
  for (size_t i = 0; i < std::size(edges) && i < n; ++i) g[i * 7 % n] = edges[i];
  return g;
}

TEST(CpuSwiGlu, MatchesDoubleReferenceOnEveryTarget) {
  TargetGuard guard;
  constexpr size_t kN = 1003;  // not a multiple of the vector
  const std::vector<float> g = gates(kN);
  std::vector<float> u(kN);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  for (auto& x : u) x = dist(rng);
  std::vector<float> with_fma;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    std::vector<float> out(kN, NAN);
    cpu_swiglu(g.data(), u.data(), out.data(), kN);
    for (size_t i = 0; i < kN; ++i) {
      const double ref = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * u[i];
      // exp within a few ulp, then a divide and a multiply: 2e-6 relative;
      // past exp's range (gate < -88.72) the kernel gives 0 for under 3e-37 * |up|.
      ASSERT_LE(std::fabs(out[i] - ref), 2e-6 * std::fabs(ref) + 1e-36) << "gate " << g[i] << " up " << u[i];
    }
    // Any stretch of the row gives the same bits: here three uneven calls, the second in place.
    std::vector<float> pieces(g);
    cpu_swiglu(pieces.data(), u.data(), pieces.data(), 3);
    cpu_swiglu(pieces.data() + 3, u.data() + 3, pieces.data() + 3, 514);
    cpu_swiglu(pieces.data() + 517, u.data() + 517, pieces.data() + 517, kN - 517);
    ASSERT_EQ(0, std::memcmp(out.data(), pieces.data(), kN * sizeof(float))) << "the split changes the result";
    const bool fma = target == HWY_AVX2 || target == HWY_AVX3 || target == HWY_AVX3_DL;
    if (!fma) continue;
    if (with_fma.empty()) with_fma = out;
    EXPECT_EQ(0, std::memcmp(with_fma.data(), out.data(), kN * sizeof(float))) << "AVX2 and AVX-512 disagree";
  }
}

}  // namespace
}  // namespace shoal
