// Scalar dequantization, one function per block layout, written from the
// layout comments in blocks.h (the same formulas as ggml's dequantize_row_*).
#include "tensor/dequantize.h"

#include <type_traits>

#include <cstring>

#include "tensor/blocks.h"
#include "tensor/interleave.h"
#include "util/error.h"

namespace shoal {

float f16_to_f32(uint16_t h) { return half_to_float(h); }

// Round to nearest even, with overflow to inf and gradual underflow.
uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // inf or NaN (keep NaN quiet and non-zero)
    return sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u | ((abs >> 13) & 0x3FFu) : 0u);
  }
  if (abs >= 0x477FF000u) return sign | 0x7C00u;  // rounds past 65504 -> inf
  if (abs < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal, mant = |f| / 2^-24
    // rounded to nearest even. Adding 0.5 (2^-1) in float does that exactly.
    float a;
    std::memcpy(&a, &abs, 4);
    const float r = a + 0.5f;  // ulp(0.5) = 2^-24 relative to the half grid
    uint32_t rb;
    std::memcpy(&rb, &r, 4);
    return sign | static_cast<uint16_t>(rb - 0x3F000000u);
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits.
  const uint32_t mant_odd = (abs >> 13) & 1u;
  const uint32_t rounded = abs + 0xFFFu + mant_odd;
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

float bf16_to_f32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

namespace {

void dequant_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++b, y += kQK) {
    const float d = half_to_float(b->d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * ((b->qs[j] & 0xF) - 8);
      y[j + kQK / 2] = d * ((b->qs[j] >> 4) - 8);
    }
  }
}

void dequant_mxfp4(const BlockMXFP4* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++b, y += kQK) {
    const float d = e8m0_half(b->e);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * kMxfp4Values[b->qs[j] & 0xF];
      y[j + kQK / 2] = d * kMxfp4Values[b->qs[j] >> 4];
    }
  }
}

void dequant_q4_1(const BlockQ4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++b, y += kQK) {
    const float d = half_to_float(b->d);
    const float m = half_to_float(b->m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * (b->qs[j] & 0xF) + m;
      y[j + kQK / 2] = d * (b->qs[j] >> 4) + m;
    }
  }
}

void dequant_q5_0(const BlockQ5_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++b, y += kQK) {
    const float d = half_to_float(b->d);
    const uint32_t qh = load_u32_le(b->qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (b->qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const int hi = (b->qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      y[j] = d * (lo - 16);
      y[j + kQK / 2] = d * (hi - 16);
    }
  }
}

void dequant_q5_1(const BlockQ5_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++b, y += kQK) {
    const float d = half_to_float(b->d);
    const float m = half_to_float(b->m);
    const uint32_t qh = load_u32_le(b->qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (b->qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const int hi = (b->qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      y[j] = d * lo + m;
      y[j + kQK / 2] = d * hi + m;
    }
  }
}

void dequant_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++b, y += kQK) {
    const float d = half_to_float(b->d);
    for (int j = 0; j < kQK; ++j) y[j] = d * b->qs[j];
  }
}

void dequant_q8_k(const BlockQ8_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++b, y += kQKK) {
    const float d = b->d;
    for (int j = 0; j < kQKK; ++j) y[j] = d * b->qs[j];
  }
}

void dequant_q2_k(const BlockQ2_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++b, y += kQKK) {
    const float d = half_to_float(b->d);
    const float dmin = half_to_float(b->dmin);
    for (int e = 0; e < kQKK; ++e) {
      const int n = e / 128, j = (e % 128) / 32, l = e % 32;
      const int q = (b->qs[32 * n + l] >> (2 * j)) & 3;
      const uint8_t sc = b->scales[e / 16];
      y[e] = d * (sc & 0xF) * q - dmin * (sc >> 4);
    }
  }
}

void dequant_q3_k(const BlockQ3_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++b, y += kQKK) {
    const float d = half_to_float(b->d);
    for (int e = 0; e < kQKK; ++e) {
      const int n = e / 128, j = (e % 128) / 32, l = e % 32;
      const int low = (b->qs[32 * n + l] >> (2 * j)) & 3;
      const bool high = (b->hmask[l] >> (4 * n + j)) & 1;
      y[e] = d * q3k_scale(b->scales, e / 16) * (low - (high ? 0 : 4));
    }
  }
}

// Q4_K and Q5_K: the same scales and mins; Q5_K adds a fifth bit per value
// from qh.
template <typename Block>
void dequant_q45_k(const Block* b, float* y, int64_t nb) {
  constexpr bool kFifthBit = std::is_same_v<Block, BlockQ5_K>;
  for (int64_t i = 0; i < nb; ++i, ++b, y += kQKK) {
    const float d = half_to_float(b->d);
    const float dmin = half_to_float(b->dmin);
    for (int j = 0; j < 4; ++j) {
      int sc0, m0, sc1, m1;
      kquant_scale_min(b->scales, 2 * j, sc0, m0);
      kquant_scale_min(b->scales, 2 * j + 1, sc1, m1);
      const float d0 = d * sc0, min0 = dmin * m0, d1 = d * sc1, min1 = dmin * m1;
      const uint8_t* q = b->qs + 32 * j;
      for (int l = 0; l < 32; ++l) {
        int lo = q[l] & 0xF, hi = q[l] >> 4;
        if constexpr (kFifthBit) {
          lo |= ((b->qh[l] >> (2 * j)) & 1) << 4;
          hi |= ((b->qh[l] >> (2 * j + 1)) & 1) << 4;
        }
        y[64 * j + l] = d0 * lo - min0;
        y[64 * j + 32 + l] = d1 * hi - min1;
      }
    }
  }
}

void dequant_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++b) {
    const float d = half_to_float(b->d);
    for (int n = 0; n < 2; ++n, y += 128) {
      const int8_t* sc = b->scales + 8 * n;
      for (int l = 0; l < 32; ++l) {
        const int g = l / 16;
        int q[4];
        q6k_quants(*b, n, l, q);
        for (int k = 0; k < 4; ++k) y[l + 32 * k] = d * sc[g + 2 * k] * q[k];
      }
    }
  }
}

}  // namespace

namespace dequantize_blocks {
void f32(const void* b, float* y, int64_t nb) { std::memcpy(y, b, static_cast<size_t>(nb) * sizeof(float)); }
template <float (*Convert)(uint16_t)>
void halves(const void* b, float* y, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(b);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    y[i] = Convert(h);
  }
}
void f16(const void* b, float* y, int64_t nb) { halves<half_to_float>(b, y, nb); }
void bf16(const void* b, float* y, int64_t nb) { halves<bf16_to_f32>(b, y, nb); }
void q4_0(const void* b, float* y, int64_t nb) { dequant_q4_0(static_cast<const BlockQ4_0*>(b), y, nb); }
void q4_1(const void* b, float* y, int64_t nb) { dequant_q4_1(static_cast<const BlockQ4_1*>(b), y, nb); }
void q5_0(const void* b, float* y, int64_t nb) { dequant_q5_0(static_cast<const BlockQ5_0*>(b), y, nb); }
void q5_1(const void* b, float* y, int64_t nb) { dequant_q5_1(static_cast<const BlockQ5_1*>(b), y, nb); }
void q8_0(const void* b, float* y, int64_t nb) { dequant_q8_0(static_cast<const BlockQ8_0*>(b), y, nb); }
void q8_k(const void* b, float* y, int64_t nb) { dequant_q8_k(static_cast<const BlockQ8_K*>(b), y, nb); }
void q2_k(const void* b, float* y, int64_t nb) { dequant_q2_k(static_cast<const BlockQ2_K*>(b), y, nb); }
void q3_k(const void* b, float* y, int64_t nb) { dequant_q3_k(static_cast<const BlockQ3_K*>(b), y, nb); }
void q4_k(const void* b, float* y, int64_t nb) { dequant_q45_k(static_cast<const BlockQ4_K*>(b), y, nb); }
void q5_k(const void* b, float* y, int64_t nb) { dequant_q45_k(static_cast<const BlockQ5_K*>(b), y, nb); }
void q6_k(const void* b, float* y, int64_t nb) { dequant_q6_k(static_cast<const BlockQ6_K*>(b), y, nb); }
void mxfp4(const void* b, float* y, int64_t nb) { dequant_mxfp4(static_cast<const BlockMXFP4*>(b), y, nb); }
}  // namespace dequantize_blocks

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const DTypeInfo& info = dtype_info(type);
  if (n < 0 || n % info.block_size != 0)
    fail("dequantize_row: {} values is not a whole number of {} blocks ({} values each)", n, info.name,
         info.block_size);
  if (!info.dequantize) fail("dequantize_row: type {} is not supported", info.name);
  info.dequantize(src, dst, n / info.block_size);
}

void check_row_ids(const Matrix& m, const int32_t* ids, int n) {
  for (int t = 0; t < n; ++t)
    if (ids[t] < 0 || ids[t] >= m.rows) fail("token id {} is outside the vocabulary of {}", ids[t], m.rows);
}

void dequantize_rows(const Matrix& m, const int32_t* ids, int n, float* out) {
  thread_local std::vector<uint8_t> scratch;  // a grouped row's plain copy: no allocation per step
  check_row_ids(m, ids, n);
  for (int t = 0; t < n; ++t) {
    dequantize_row(m.type, plain_row(m, ids[t], scratch), out + static_cast<int64_t>(t) * m.cols, m.cols);
  }
}

}  // namespace shoal
