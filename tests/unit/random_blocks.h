#pragma once
// Random rows for kernel tests: weights of every type (random_weights, in
// src/tensor: the device probe uses it too) and floats.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "tensor/dequantize.h"
#include "tensor/dtype.h"
#include "tensor/random_weights.h"

namespace shoal {

inline std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = normal(rng);
  return x;
}

}  // namespace shoal
