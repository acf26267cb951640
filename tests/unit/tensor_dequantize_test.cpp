// dequantize_row against hand-built blocks, against values computed by an
// independent implementation (gguf-py's quants.dequantize), and the half /
// bfloat16 conversions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tensor/blocks.h"
#include "tensor/dequantize.h"
#include "tensor/dtype.h"
#include "util/error.h"

namespace shoal {
namespace {

std::vector<float> dequant(DType type, const void* src, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(type, src, out.data(), n);
  return out;
}

TEST(TensorHalf, KnownValues) {
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  EXPECT_EQ(f16_to_f32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));

  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // halfway past the largest half: inf
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie -> even
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie -> even
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);             // tie -> even (0)
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);             // 1.5 ulp -> 2
  EXPECT_EQ(f32_to_f16(1e-10f), 0x0000);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(f32_to_f16(std::nanf("")) & 0x7C00, 0x7C00);
  EXPECT_NE(f32_to_f16(std::nanf("")) & 0x03FF, 0);

  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xC0A0), -5.0f);
}

TEST(TensorHalf, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
}

// Every float rounds to the nearer of its two neighbouring halves.
TEST(TensorHalf, RoundsToNearest) {
  std::vector<float> values;
  for (int e = -26; e <= 14; ++e)
    for (int k = 0; k < 64; ++k) values.push_back(std::ldexp(1.0f + k / 64.0f + 1e-3f * k, e));
  for (float v : values) {
    for (float x : {v, -v}) {
      const float r = f16_to_f32(f32_to_f16(x));
      const uint16_t h = f32_to_f16(x);
      const float up = f16_to_f32(static_cast<uint16_t>(h + 1));
      const float down = (h & 0x7FFF) ? f16_to_f32(static_cast<uint16_t>(h - 1)) : r;
      ASSERT_LE(std::fabs(r - x), std::fabs(up - x)) << x;
      ASSERT_LE(std::fabs(r - x), std::fabs(down - x)) << x;
    }
  }
}

TEST(TensorDequantize, Q8_0ByHand) {
  BlockQ8_0 b;
  b.d = 0x3800;  // 0.5
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j - 16);
  const auto x = dequant(DType::Q8_0, &b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(x[j], 0.5f * (j - 16)) << j;
  EXPECT_EQ(x[0], -8.0f);
  EXPECT_EQ(x[31], 7.5f);
}

TEST(TensorDequantize, Q4_0ByHand) {
  BlockQ4_0 b;
  b.d = 0x4000;  // 2.0
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto x = dequant(DType::Q4_0, &b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(x[j], 2.0f * (j - 8)) << j;        // low nibbles: first half
    EXPECT_EQ(x[16 + j], 2.0f * (7 - j)) << j;   // high nibbles: second half
  }
  EXPECT_EQ(x[0], -16.0f);
  EXPECT_EQ(x[15], 14.0f);
  EXPECT_EQ(x[16], 14.0f);
  EXPECT_EQ(x[31], -16.0f);
}

TEST(TensorDequantize, Q4_1ByHand) {
  BlockQ4_1 b[2];
  b[0].d = 0x3400;  // 0.25
  b[0].m = 0xBC00;  // -1.0
  b[1].d = 0x4000;  // 2.0
  b[1].m = 0x3C00;  // 1.0
  for (int j = 0; j < 16; ++j) {
    b[0].qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    b[1].qs[j] = 0x5A;  // low 10, high 5
  }
  const auto x = dequant(DType::Q4_1, b, 64);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(x[j], 0.25f * j - 1.0f) << j;
    EXPECT_EQ(x[16 + j], 0.25f * (15 - j) - 1.0f) << j;
    EXPECT_EQ(x[32 + j], 21.0f) << j;
    EXPECT_EQ(x[48 + j], 11.0f) << j;
  }
}

TEST(TensorDequantize, Q5_0AndQ5_1FifthBitByHand) {
  BlockQ5_0 b0;
  b0.d = 0x3C00;                              // 1.0
  std::memset(b0.qs, 0x00, sizeof(b0.qs));    // all low nibbles 0
  const uint32_t qh = 0x80000001u;            // fifth bit of values 0 and 31
  std::memcpy(b0.qh, &qh, 4);
  auto x = dequant(DType::Q5_0, &b0, 32);
  EXPECT_EQ(x[0], 0.0f);    // 16 - 16
  EXPECT_EQ(x[1], -16.0f);  // 0 - 16
  EXPECT_EQ(x[31], 0.0f);
  EXPECT_EQ(x[30], -16.0f);

  BlockQ5_1 b1;
  b1.d = 0x3800;  // 0.5
  b1.m = 0x4000;  // 2.0
  std::memset(b1.qs, 0xFF, sizeof(b1.qs));
  std::memcpy(b1.qh, &qh, 4);
  x = dequant(DType::Q5_1, &b1, 32);
  EXPECT_EQ(x[0], 0.5f * 31 + 2.0f);
  EXPECT_EQ(x[1], 0.5f * 15 + 2.0f);
  EXPECT_EQ(x[31], 0.5f * 31 + 2.0f);
}

TEST(TensorDequantize, Q4_KByHand) {
  BlockQ4_K b;
  b.d = 0x3C00;     // 1.0
  b.dmin = 0x3800;  // 0.5
  // Sub-block 0: scale 3, min 5 (6-bit fields in bytes 0 and 4); sub-block 5:
  // scale = low nibble of byte 9 | top bits of byte 1 << 4 = 2 | 1 << 4 = 18,
  // min = high nibble of byte 9 | top bits of byte 5 << 4 = 4 | 2 << 4 = 36.
  std::memset(b.scales, 0, sizeof(b.scales));
  b.scales[0] = 3;
  b.scales[4] = 5;
  b.scales[1] = 1 << 6;
  b.scales[5] = 2 << 6;
  b.scales[9] = 0x42;
  for (int l = 0; l < 128; ++l) b.qs[l] = static_cast<uint8_t>(7 | (9 << 4));
  const auto x = dequant(DType::Q4_K, &b, 256);
  EXPECT_EQ(x[0], 3.0f * 7 - 0.5f * 5);     // sub-block 0, low nibble
  EXPECT_EQ(x[31], 3.0f * 7 - 0.5f * 5);
  EXPECT_EQ(x[32], 0.0f);                   // sub-block 1: scale 0, min 0
  EXPECT_EQ(x[160], 18.0f * 9 - 0.5f * 36);  // sub-block 5 = high nibbles of bytes 64..95
}

TEST(TensorDequantize, Q6_KByHand) {
  BlockQ6_K b;
  std::memset(&b, 0, sizeof(b));
  b.d = 0x3800;  // 0.5
  for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<int8_t>(g - 8);
  b.ql[0] = 0x21;   // value 0: low nibble 1; value 64: high nibble 2
  b.qh[0] = 0xC6;   // value 0: bits 0-1 = 2; value 32: 1; value 64: 0; value 96: 3
  const auto x = dequant(DType::Q6_K, &b, 256);
  EXPECT_EQ(x[0], 0.5f * (0 - 8) * ((1 | 2 << 4) - 32));
  EXPECT_EQ(x[32], 0.5f * (2 - 8) * ((0 | 1 << 4) - 32));
  EXPECT_EQ(x[64], 0.5f * (4 - 8) * ((2 | 0 << 4) - 32));
  EXPECT_EQ(x[96], 0.5f * (6 - 8) * ((0 | 3 << 4) - 32));
  EXPECT_EQ(x[1], 0.5f * (0 - 8) * -32);
}

// Two blocks of bytes (k * 73 + 41) mod 256 with the f16 fields overwritten;
// the expected values come from gguf-py 0.19 (quants.dequantize), an
// independent implementation of the same layouts.
struct Golden {
  DType type;
  double sum;           // sum of all values
  double weighted_sum;  // sum of x[k] * ((k % 7) - 3)
  std::vector<std::pair<int, double>> values;
};

std::vector<uint8_t> pattern_blocks(DType type) {
  const int bb = dtype_info(type).block_bytes;
  std::vector<uint8_t> b(2 * static_cast<size_t>(bb));
  for (size_t k = 0; k < b.size(); ++k) b[k] = static_cast<uint8_t>((k * 73 + 41) % 256);
  auto put = [&](int offset, uint16_t v0, uint16_t v1) {
    std::memcpy(&b[offset], &v0, 2);
    std::memcpy(&b[bb + offset], &v1, 2);
  };
  const bool has_min = type == DType::Q4_1 || type == DType::Q5_1;
  switch (type) {
    case DType::Q2_K: put(80, 0x3000, 0x2C00); put(82, 0x3400, 0x2800); break;
    case DType::Q3_K: put(108, 0x3000, 0x2C00); break;
    case DType::Q6_K: put(208, 0x3000, 0x2C00); break;
    case DType::Q4_K:
    case DType::Q5_K: put(0, 0x3000, 0x2C00); put(2, 0x3400, 0x2800); break;
    default:
      put(0, 0x3000, 0x2C00);
      if (has_min) put(2, 0xB400, 0x3800);
  }
  return b;
}

TEST(TensorDequantize, MatchesGgufPy) {
  const std::vector<Golden> golden = {
      {DType::Q4_0, -6.0625, 13.25, {{0, 0.375}, {1, -0.5}, {17, -1.0}, {37, 0.125}, {63, -0.375}}},
      {DType::Q4_1, 50.4375, -13.0, {{0, 1.375}, {1, 0.5}, {17, 0.875}, {37, 1.375}, {63, 0.75}}},
      {DType::Q5_0, -10.0625, -10.125, {{0, 1.875}, {1, 1.0}, {17, -1.75}, {37, -0.875}, {63, 0.375}}},
      {DType::Q5_1, 100.4375, 3.375, {{0, 1.875}, {1, 1.0}, {17, 3.125}, {37, 1.875}, {63, 1.0625}}},
      {DType::Q8_0, -5.0, 255.875, {{0, -8.625}, {1, 0.5}, {17, -13.5}, {37, -2.375}, {63, 4.25}}},
      {DType::Q2_K, 72.25, 17.46875, {{0, 0.625}, {1, 1.75}, {17, -1.25}, {261, 1.59375}, {511, 0.3125}}},
      {DType::Q3_K, 77.75, -39.4375, {{0, -0.875}, {1, 1.75}, {17, -0.5}, {261, -5.75}, {511, 2.25}}},
      {DType::Q4_K, 9459.5, 138.15625, {{0, 2.375}, {1, -9.0}, {17, -9.0}, {261, 10.84375}, {511, -0.75}}},
      {DType::Q5_K, 18708.5, 1350.15625, {{0, 28.375}, {1, -9.0}, {17, -9.0}, {261, 21.84375}, {511, 19.1875}}},
      {DType::Q6_K, -1921.75, -6719.1875, {{0, 20.125}, {1, -5.75}, {17, 12.5}, {261, 79.5}, {511, 4.5}}},
  };
  for (const Golden& g : golden) {
    SCOPED_TRACE(dtype_info(g.type).name);
    const auto bytes = pattern_blocks(g.type);
    const int64_t n = 2 * dtype_info(g.type).block_size;
    const auto x = dequant(g.type, bytes.data(), n);
    double sum = 0, weighted = 0;
    for (int64_t k = 0; k < n; ++k) {
      sum += x[k];
      weighted += x[k] * ((k % 7) - 3);
    }
    // All scales are powers of two: every value and both sums are exact.
    EXPECT_EQ(sum, g.sum);
    EXPECT_EQ(weighted, g.weighted_sum);
    for (const auto& [k, v] : g.values) EXPECT_EQ(x[k], v) << "value " << k;
  }
}

TEST(TensorDequantize, FloatTypes) {
  const float f[3] = {1.5f, -0.25f, 3.0f};
  EXPECT_EQ(dequant(DType::F32, f, 3), std::vector<float>(f, f + 3));
  // Misaligned halves: the row may start at an odd address.
  uint8_t raw[7] = {0xAA, 0x00, 0x3C, 0x00, 0xC0, 0x80, 0x3F};
  EXPECT_EQ(dequant(DType::F16, raw + 1, 2), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(dequant(DType::BF16, raw + 5, 1), (std::vector<float>{1.0f}));
}

TEST(TensorDequantize, RejectsBadInput) {
  float out[64];
  uint8_t zeros[64] = {};
  EXPECT_THROW(dequantize_row(DType::Q4_0, zeros, out, 33), Error);
  EXPECT_THROW(dequantize_row(DType::Q8_1, zeros, out, 32), Error);
}

}  // namespace
}  // namespace shoal
