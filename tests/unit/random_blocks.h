#pragma once
// Random rows of every weight type for kernel tests: random bytes for the
// quants, with the f16 scales overwritten by sane values.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "tensor/dequantize.h"
#include "tensor/dtype.h"

namespace shoal {

inline void put_half(std::vector<uint8_t>& row, size_t offset, float value) {
  const uint16_t h = f32_to_f16(value);
  std::memcpy(&row[offset], &h, 2);
}

// Random bytes for the quants; the f16 scales are overwritten with sane
// values (as a real quantizer would write them): d in +-[1e-3, 5e-2] for
// the 32-blocks, d and dmin in [1e-4, 1e-2] for the K-quants.
inline std::vector<uint8_t> random_weights(DType type, int64_t n, std::mt19937& rng) {
  const DTypeInfo& info = dtype_info(type);
  std::vector<uint8_t> row(row_bytes(type, n));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : row) b = static_cast<uint8_t>(byte(rng));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> small(1e-3f, 5e-2f), tiny(1e-4f, 1e-2f), offset(-0.2f, 0.2f);
  const auto sign = [&] { return byte(rng) < 128 ? -1.0f : 1.0f; };
  for (int64_t i = 0; i < n / info.block_size; ++i) {
    const size_t base = static_cast<size_t>(i) * info.block_bytes;
    switch (type) {
      case DType::F32: {
        const float v = normal(rng);
        std::memcpy(&row[base], &v, 4);
        break;
      }
      case DType::F16: put_half(row, base, normal(rng)); break;
      case DType::BF16: {
        const float v = normal(rng);
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        const uint16_t top = static_cast<uint16_t>(bits >> 16);
        std::memcpy(&row[base], &top, 2);
        break;
      }
      case DType::Q4_1:
      case DType::Q5_1:
        put_half(row, base, small(rng));
        put_half(row, base + 2, offset(rng));
        break;
      case DType::Q4_0:
      case DType::Q5_0:
      case DType::Q8_0: put_half(row, base, sign() * small(rng)); break;
      case DType::Q2_K: put_half(row, base + 80, tiny(rng)); put_half(row, base + 82, tiny(rng)); break;
      case DType::Q3_K: put_half(row, base + 108, tiny(rng)); break;
      case DType::Q4_K:
      case DType::Q5_K: put_half(row, base, tiny(rng)); put_half(row, base + 2, tiny(rng)); break;
      case DType::Q6_K: put_half(row, base + 208, tiny(rng)); break;
      default: ADD_FAILURE() << "no generator for " << info.name;
    }
  }
  return row;
}

inline std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = normal(rng);
  return x;
}

}  // namespace shoal
