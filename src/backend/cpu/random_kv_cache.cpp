#include "backend/cpu/random_kv_cache.h"

#include <cstring>
#include <tuple>

#include "tensor/dequantize.h"
#include "tensor/quantize.h"

namespace shoal {

RandomKvCache::RandomKvCache(DType k_type, DType v_type, int width, int n_pos, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  view.k_type = k_type;
  view.v_type = v_type;
  view.width = width;
  view.k_row_bytes = row_bytes(k_type, width);
  view.v_row_bytes = row_bytes(v_type, width);
  view.k_seq_stride = view.k_row_bytes * n_pos;
  view.v_seq_stride = view.v_row_bytes * n_pos;
  k.resize(view.k_seq_stride);
  v.resize(view.v_seq_stride);
  std::vector<float> row(width);
  for (int p = 0; p < n_pos; ++p) {
    for (auto [type, dst, bytes] : {std::tuple{k_type, &k, view.k_row_bytes}, std::tuple{v_type, &v, view.v_row_bytes}}) {
      for (float& x : row) x = dist(rng);
      uint8_t* out = dst->data() + p * bytes;
      if (type == DType::F32) std::memcpy(out, row.data(), width * sizeof(float));
      if (type == DType::F16)
        for (int i = 0; i < width; ++i) reinterpret_cast<uint16_t*>(out)[i] = f32_to_f16(row[i]);
      if (type == DType::Q8_0) quantize_row_reference(DType::Q8_0, row.data(), out, width);
    }
  }
  view.k = k.data();
  view.v = v.data();
}

}  // namespace shoal
