#include "tensor/dtype.h"

#include <array>

#include "tensor/dequantize.h"
#include "util/error.h"

namespace shoal {
namespace {

constexpr DType kNone = DType::F32;  // the activation partner of a type that is no weight (unused)

constexpr std::array kTypes = {
    DTypeInfo{DType::F32, "F32", 1, 4, true, DType::F32, dequantize_blocks::f32},
    DTypeInfo{DType::F16, "F16", 1, 2, true, DType::F32, dequantize_blocks::f16},
    DTypeInfo{DType::Q4_0, "Q4_0", 32, 18, true, DType::Q8_0, dequantize_blocks::q4_0},
    DTypeInfo{DType::Q4_1, "Q4_1", 32, 20, true, DType::Q8_0, dequantize_blocks::q4_1},
    DTypeInfo{DType::Q5_0, "Q5_0", 32, 22, true, DType::Q8_0, dequantize_blocks::q5_0},
    DTypeInfo{DType::Q5_1, "Q5_1", 32, 24, true, DType::Q8_0, dequantize_blocks::q5_1},
    DTypeInfo{DType::Q8_0, "Q8_0", 32, 34, true, DType::Q8_0, dequantize_blocks::q8_0},
    DTypeInfo{DType::Q8_1, "Q8_1", 32, 36, false, kNone, nullptr},
    DTypeInfo{DType::Q2_K, "Q2_K", 256, 84, true, DType::Q8_K, dequantize_blocks::q2_k},
    DTypeInfo{DType::Q3_K, "Q3_K", 256, 110, true, DType::Q8_K, dequantize_blocks::q3_k},
    DTypeInfo{DType::Q4_K, "Q4_K", 256, 144, true, DType::Q8_K, dequantize_blocks::q4_k},
    DTypeInfo{DType::Q5_K, "Q5_K", 256, 176, true, DType::Q8_K, dequantize_blocks::q5_k},
    DTypeInfo{DType::Q6_K, "Q6_K", 256, 210, true, DType::Q8_K, dequantize_blocks::q6_k},
    DTypeInfo{DType::Q8_K, "Q8_K", 256, 292, false, kNone, dequantize_blocks::q8_k},
    DTypeInfo{DType::BF16, "BF16", 1, 2, true, DType::F32, dequantize_blocks::bf16},
    DTypeInfo{DType::MXFP4, "MXFP4", 32, 17, true, DType::Q8_0, dequantize_blocks::mxfp4},
};

// By GGUF id: the ids are small (under 64), so a lookup is one index.
constexpr size_t kIds = 64;
constexpr std::array<const DTypeInfo*, kIds> index_by_id() {
  std::array<const DTypeInfo*, kIds> index{};
  for (const DTypeInfo& info : kTypes) index[static_cast<size_t>(info.type)] = &info;
  return index;
}
constexpr std::array<const DTypeInfo*, kIds> kById = index_by_id();

}  // namespace

const DTypeInfo* find_dtype(uint32_t ggml_type) { return ggml_type < kIds ? kById[ggml_type] : nullptr; }

const DTypeInfo& dtype_info(DType type) {
  const DTypeInfo* info = find_dtype(static_cast<uint32_t>(type));
  if (!info) fail("internal: unknown dtype {}", static_cast<uint32_t>(type));
  return *info;
}

}  // namespace shoal
