#pragma once
// The compute shaders compiled at build time (CMakeLists.txt generates the
// table from src/backend/vulkan/shaders/).
#include <cstddef>
#include <cstdint>

namespace shoal {

struct SpirvShader {
  const char* name;  // "matmul_Q4_K", "attention", ...
  const uint32_t* words;
  size_t n_words;
};
extern const SpirvShader kSpirvShaders[];
extern const size_t kSpirvShaderCount;

}  // namespace shoal
