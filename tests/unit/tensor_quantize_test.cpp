// Encoders: quantize -> dequantize error bounds for the types Shoal can
// encode, and quantize_activation (SIMD, every compiled target) producing
// exactly the bytes of the scalar reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "hwy/targets.h"
#include "tensor/blocks.h"
#include "tensor/dequantize.h"
#include "tensor/dtype.h"
#include "tensor/quantize.h"
#include "tensor/vec_dot.h"
#include "util/error.h"
#include "target_guard.h"

namespace shoal {
namespace {

// Rows with blocks of very different magnitudes, a zero block and a
// constant block, so scales and the zero path are exercised.
std::vector<float> test_row(int64_t n, int block, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  const float magnitudes[] = {1.0f, 1e-3f, 30.0f, 0.2f};
  for (int64_t b = 0; b < n / block; ++b) {
    float* p = x.data() + b * block;
    if (b == 1) continue;  // all zeros
    if (b == 2) {
      std::fill(p, p + block, -0.75f);
      continue;
    }
    for (int j = 0; j < block; ++j) p[j] = magnitudes[b % 4] * normal(rng);
  }
  return x;
}

// Largest error allowed for an element of a block: half a quantization
// step (a whole one at Q4_0/Q5_0's clamped end), plus what rounding the
// scale (and min) to f16 can add.
struct BlockStats {
  float amax, min, max;
};
float error_bound(DType type, const BlockStats& s) {
  constexpr float h = 1.0f / 2048;  // f16 relative rounding
  const float slack = 1.001f;
  const float tiny = 1e-6f * s.amax + 1e-30f;
  switch (type) {
    case DType::Q8_0: return slack * s.amax / 127 * (0.5f + 127 * h) + tiny;
    case DType::Q8_K: return slack * s.amax / 127 * 0.5f + tiny;
    // The extreme value maps to -8 (-16) and its mirror image to 8, which
    // clamps to 7 (15): a whole step on that side.
    case DType::Q4_0: return slack * s.amax / 8 * (1.0f + 8 * h) + tiny;
    case DType::Q5_0: return slack * s.amax / 16 * (1.0f + 16 * h) + tiny;
    case DType::Q4_1: {
      const float d = (s.max - s.min) / 15;
      return slack * (d * (0.5f + 15 * h) + std::fabs(s.min) * h) + tiny;
    }
    case DType::Q5_1: {
      const float d = (s.max - s.min) / 31;
      return slack * (d * (0.5f + 31 * h) + std::fabs(s.min) * h) + tiny;
    }
    default: return 0;
  }
}

TEST(TensorQuantize, RoundTripWithinBounds) {
  // Typical rms error relative to the rms of the values (gaussian blocks).
  const std::pair<DType, double> types[] = {{DType::Q8_0, 0.01}, {DType::Q8_K, 0.01}, {DType::Q4_0, 0.12},
                                            {DType::Q4_1, 0.12}, {DType::Q5_0, 0.06}, {DType::Q5_1, 0.06}};
  for (const auto& [type, rms_limit] : types) {
    SCOPED_TRACE(dtype_info(type).name);
    const int block = dtype_info(type).block_size;
    const int64_t n = 8 * block;
    const auto x = test_row(n, block, 7);
    std::vector<uint8_t> q(row_bytes(type, n));
    quantize_row_reference(type, x.data(), q.data(), n);
    std::vector<float> y(static_cast<size_t>(n));
    dequantize_row(type, q.data(), y.data(), n);

    double err2 = 0, x2 = 0;
    for (int64_t b = 0; b < n / block; ++b) {
      const float* xb = x.data() + b * block;
      BlockStats s{0, *std::min_element(xb, xb + block), *std::max_element(xb, xb + block)};
      for (int j = 0; j < block; ++j) s.amax = std::max(s.amax, std::fabs(xb[j]));
      const float bound = error_bound(type, s);
      for (int j = 0; j < block; ++j) {
        const float e = std::fabs(y[b * block + j] - xb[j]);
        ASSERT_LE(e, bound) << "block " << b << " value " << j << ": " << xb[j] << " -> " << y[b * block + j];
        if (b != 1 && b != 2 && b % 4 == 0) {  // the unit-scale gaussian blocks
          err2 += double(e) * e;
          x2 += double(xb[j]) * xb[j];
        }
      }
      if (b == 1) {
        for (int j = 0; j < block; ++j) ASSERT_EQ(y[b * block + j], 0.0f);
      }
    }
    const double rel = std::sqrt(err2 / x2);
    EXPECT_GT(rel, 0.0);  // the data really was rounded
    EXPECT_LT(rel, rms_limit);
  }
}

// ggml's extreme value maps to the end of the grid exactly.
TEST(TensorQuantize, Q4_0UsesGgmlGrid) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);  // extreme -16
  BlockQ4_0 b;
  quantize_row_reference(DType::Q4_0, x, &b, 32);
  EXPECT_EQ(f16_to_f32(b.d), 2.0f);  // -16 / -8
  EXPECT_EQ(b.qs[0] & 0xF, 0);       // -16 -> q 0
  EXPECT_EQ(b.qs[15] >> 4, 15);      // 15 -> 7.5 + 8.5 -> clamped to 15 (value 14)
}

TEST(TensorQuantize, Q8_KBlockSums) {
  const auto x = test_row(512, 256, 3);
  BlockQ8_K b[2];
  quantize_row_reference(DType::Q8_K, x.data(), b, 512);
  EXPECT_GT(b[0].d, 0.0f);
  EXPECT_EQ(b[1].d, 0.0f);  // test_row's second block is zeros
  for (const BlockQ8_K& blk : b) {
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += blk.qs[16 * g + j];
      EXPECT_EQ(blk.bsums[g], sum);
    }
    int amax_q = 0;
    for (int8_t q : blk.qs) amax_q = std::max(amax_q, std::abs(static_cast<int>(q)));
    EXPECT_EQ(amax_q, blk.d != 0.0f ? 127 : 0);  // the extreme value maps to +-127
  }
}

TEST(TensorQuantize, ActivationMatchesReferenceOnEveryTarget) {
  TargetGuard guard;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (const DType weight : {DType::Q4_1, DType::Q6_K}) {
      const DType act = activation_dtype(weight);
      const int block = dtype_info(act).block_size;
      for (const int nblocks : {1, 3, 8}) {
        const int64_t n = static_cast<int64_t>(nblocks) * block;
        auto x = test_row(n, block, 11 + nblocks);
        // Exact ties: in a block whose max is 127, x * 127 / amax == x.
        if (nblocks == 8) {
          float* p = x.data() + 3 * block;
          p[0] = 127.0f;
          for (int j = 1; j < block; ++j) p[j] = static_cast<float>(j % 9) - 4.5f;
        }
        std::vector<uint8_t> fast(row_bytes(act, n) + 1), ref(row_bytes(act, n));
        quantize_activation(weight, x.data(), fast.data() + 1, n);  // misaligned destination
        quantize_row_reference(act, x.data(), ref.data(), n);
        ASSERT_EQ(0, std::memcmp(fast.data() + 1, ref.data(), ref.size())) << dtype_info(act).name << " n=" << n;
      }
    }
  }
}

TEST(TensorQuantize, ActivationTiesRoundToEven) {
  float x[32];
  x[0] = 127.0f;
  for (int j = 1; j < 32; ++j) x[j] = 0.5f + (j - 16);  // -15.5 .. 15.5
  BlockQ8_0 b;
  quantize_activation(DType::Q8_0, x, &b, 32);
  EXPECT_EQ(f16_to_f32(b.d), 1.0f);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[16], 0);   // 0.5 -> 0
  EXPECT_EQ(b.qs[17], 2);   // 1.5 -> 2
  EXPECT_EQ(b.qs[15], 0);   // -0.5 -> -0
  EXPECT_EQ(b.qs[14], -2);  // -1.5 -> -2
}

TEST(TensorQuantize, RejectsBadInput) {
  float x[64] = {};
  uint8_t out[512];
  EXPECT_THROW(quantize_row_reference(DType::Q4_K, x, out, 256), Error);
  EXPECT_THROW(quantize_row_reference(DType::Q8_0, x, out, 31), Error);
  EXPECT_THROW(quantize_activation(DType::Q4_0, x, out, 48), Error);
  EXPECT_THROW(quantize_activation(DType::Q8_1, x, out, 32), Error);
  EXPECT_EQ(activation_dtype(DType::F16), DType::F32);
  EXPECT_EQ(activation_dtype(DType::Q5_1), DType::Q8_0);
  EXPECT_EQ(activation_dtype(DType::Q3_K), DType::Q8_K);
}

}  // namespace
}  // namespace shoal
