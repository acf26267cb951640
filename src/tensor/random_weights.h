#pragma once
// Rows of any weight type that look like a quantizer wrote them: random
// quants with sane f16 scales. For the kernel tests, and for the device
// probe, which times the kernels on the model's own type.
#include <cstdint>
#include <random>
#include <vector>

#include "tensor/dtype.h"

namespace shoal {

// n values (a whole number of blocks) of `type`: random bytes for the
// quants; the f16 scales are overwritten with sane values: d in
// +-[1e-3, 5e-2] for the 32-blocks, d and dmin in [1e-4, 1e-2] for the
// K-quants; floats normal(0, 1). Throws shoal::Error for a type it has no
// generator for.
std::vector<uint8_t> random_weights(DType type, int64_t n, std::mt19937& rng);
// Whether random_weights (and the matvec kernels) take this GGUF type id.
bool is_weight_type(uint32_t ggml_type);

}  // namespace shoal
