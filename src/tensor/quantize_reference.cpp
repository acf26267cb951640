// Scalar encoders (see quantize.h). The weight encoders use ggml's reference
// rounding (truncate x + 0.5 after offsetting); the activation encoders use
// round-to-nearest-even so that the SIMD path (NearestInt) agrees bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "tensor/blocks.h"
#include "tensor/dequantize.h"
#include "tensor/quantize.h"
#include "util/error.h"

namespace shoal {
namespace {

// The value of largest magnitude (first one on ties), keeping its sign.
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void quant_q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++y, x += kQK) {
    // The extreme value maps to -8 exactly, so the full range [-8, 7] is used.
    const float d = signed_absmax(x, kQK) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = f32_to_f16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
      const int q1 = std::min(15, static_cast<int>(x[j + kQK / 2] * id + 8.5f));
      y->qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void quant_q5_0(const float* x, BlockQ5_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++y, x += kQK) {
    const float d = signed_absmax(x, kQK) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = f32_to_f16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(31, static_cast<int>(x[j] * id + 16.5f));
      const int q1 = std::min(31, static_cast<int>(x[j + kQK / 2] * id + 16.5f));
      y->qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= static_cast<uint32_t>(q0 >> 4) << j;
      qh |= static_cast<uint32_t>(q1 >> 4) << (j + 16);
    }
    std::memcpy(y->qh, &qh, 4);
  }
}

// Q4_1 and Q5_1: an affine grid from the block minimum; `levels` = 15 or 31.
template <typename Block>
void quant_affine(const float* x, Block* y, int64_t nb, int levels) {
  for (int64_t i = 0; i < nb; ++i, ++y, x += kQK) {
    const auto [lo, hi] = std::minmax_element(x, x + kQK);
    const float min = *lo, d = (*hi - *lo) / static_cast<float>(levels);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = f32_to_f16(d);
    y->m = f32_to_f16(min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(levels, static_cast<int>((x[j] - min) * id + 0.5f));
      const int q1 = std::min(levels, static_cast<int>((x[j + kQK / 2] - min) * id + 0.5f));
      y->qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= static_cast<uint32_t>(q0 >> 4) << j;
      qh |= static_cast<uint32_t>(q1 >> 4) << (j + 16);
    }
    if constexpr (std::is_same_v<Block, BlockQ5_1>) std::memcpy(y->qh, &qh, 4);
  }
}

float absmax(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax;
}

// Activations: d = amax / 127 (stored as f16); q = round_even(x * 127/amax).
void quant_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++y, x += kQK) {
    const float amax = absmax(x, kQK);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y->d = f32_to_f16(amax / 127.0f);
    for (int j = 0; j < kQK; ++j) y->qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
  }
}

// Like ggml's quantize_row_q8_K, but with a positive scale: ggml divides by
// the signed extreme (-127 / max), which flips the signs of both d and qs
// when max > 0 and leaves every product d * q unchanged.
void quant_q8_k(const float* x, BlockQ8_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++y, x += kQKK) {
    const float amax = absmax(x, kQKK);
    if (amax == 0.0f) {
      std::memset(y, 0, sizeof(*y));
      continue;
    }
    const float iscale = 127.0f / amax;
    for (int j = 0; j < kQKK; ++j)
      y->qs[j] = static_cast<int8_t>(std::min(127.0f, std::nearbyint(x[j] * iscale)));
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y->qs[16 * g + j];
      y->bsums[g] = static_cast<int16_t>(sum);
    }
    y->d = 1.0f / iscale;
  }
}

}  // namespace

void quantize_row_reference(DType type, const float* src, void* dst, int64_t n) {
  const DTypeInfo& info = dtype_info(type);
  if (n < 0 || n % info.block_size != 0)
    fail("quantize_row_reference: {} values is not a whole number of {} blocks", n, info.name);
  const int64_t nb = n / info.block_size;
  switch (type) {
    case DType::Q4_0: return quant_q4_0(src, static_cast<BlockQ4_0*>(dst), nb);
    case DType::Q4_1: return quant_affine(src, static_cast<BlockQ4_1*>(dst), nb, 15);
    case DType::Q5_0: return quant_q5_0(src, static_cast<BlockQ5_0*>(dst), nb);
    case DType::Q5_1: return quant_affine(src, static_cast<BlockQ5_1*>(dst), nb, 31);
    case DType::Q8_0: return quant_q8_0(src, static_cast<BlockQ8_0*>(dst), nb);
    case DType::Q8_K: return quant_q8_k(src, static_cast<BlockQ8_K*>(dst), nb);
    default: break;
  }
  fail("quantize_row_reference: no encoder for type {}", info.name);
}

}  // namespace shoal
