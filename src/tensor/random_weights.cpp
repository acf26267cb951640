#include "tensor/random_weights.h"

#include <cstring>

#include "tensor/dequantize.h"
#include "util/error.h"

namespace shoal {
namespace {

void put_half(std::vector<uint8_t>& row, size_t offset, float value) {
  const uint16_t h = f32_to_f16(value);
  std::memcpy(&row[offset], &h, 2);
}

}  // namespace

bool is_weight_type(uint32_t ggml_type) {
  const DTypeInfo* info = find_dtype(ggml_type);
  return info && info->weight;
}

std::vector<uint8_t> random_weights(DType type, int64_t n, std::mt19937& rng) {
  const DTypeInfo& info = dtype_info(type);
  if (n % info.block_size != 0) fail("random_weights: {} values is not a whole number of {} blocks", n, info.name);
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
      case DType::MXFP4: row[base] = static_cast<uint8_t>(116 + byte(rng) % 8); break;  // scales 2^-12 .. 2^-5
      default: fail("random_weights: no generator for {}", info.name);
    }
  }
  return row;
}

}  // namespace shoal
