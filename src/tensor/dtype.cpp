#include "tensor/dtype.h"

#include <array>

#include "util/error.h"

namespace shoal {
namespace {

constexpr std::array kTypes = {
    DTypeInfo{DType::F32, "F32", 1, 4},
    DTypeInfo{DType::F16, "F16", 1, 2},
    DTypeInfo{DType::Q4_0, "Q4_0", 32, 18},
    DTypeInfo{DType::Q4_1, "Q4_1", 32, 20},
    DTypeInfo{DType::Q5_0, "Q5_0", 32, 22},
    DTypeInfo{DType::Q5_1, "Q5_1", 32, 24},
    DTypeInfo{DType::Q8_0, "Q8_0", 32, 34},
    DTypeInfo{DType::Q8_1, "Q8_1", 32, 36},
    DTypeInfo{DType::Q2_K, "Q2_K", 256, 84},
    DTypeInfo{DType::Q3_K, "Q3_K", 256, 110},
    DTypeInfo{DType::Q4_K, "Q4_K", 256, 144},
    DTypeInfo{DType::Q5_K, "Q5_K", 256, 176},
    DTypeInfo{DType::Q6_K, "Q6_K", 256, 210},
    DTypeInfo{DType::Q8_K, "Q8_K", 256, 292},
    DTypeInfo{DType::BF16, "BF16", 1, 2},
    DTypeInfo{DType::MXFP4, "MXFP4", 32, 17},
};

}  // namespace

const DTypeInfo* find_dtype(uint32_t ggml_type) {
  for (const auto& info : kTypes)
    if (static_cast<uint32_t>(info.type) == ggml_type) return &info;
  return nullptr;
}

const DTypeInfo& dtype_info(DType type) {
  const DTypeInfo* info = find_dtype(static_cast<uint32_t>(type));
  if (!info) fail("internal: unknown dtype {}", static_cast<uint32_t>(type));
  return *info;
}

}  // namespace shoal
