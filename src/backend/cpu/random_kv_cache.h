#pragma once
// A KV cache of one sequence filled with normal(0, 1) values stored in the
// chosen types: what the attention tests and benchmark run the kernel on.
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"

namespace shoal {

struct RandomKvCache {
  std::vector<uint8_t> k, v;
  KvLayerView view;  // points into k and v: not copyable
  RandomKvCache(DType k_type, DType v_type, int width, int n_pos, std::mt19937& rng);
  RandomKvCache(const RandomKvCache&) = delete;
  RandomKvCache& operator=(const RandomKvCache&) = delete;
};

}  // namespace shoal
