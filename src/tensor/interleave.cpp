#include "tensor/interleave.h"

#include <cstring>

#include "util/error.h"

namespace shoal {

bool interleavable(DType type) {
  return type == DType::Q4_0 || type == DType::Q4_1 || type == DType::Q5_0 || type == DType::Q8_0 ||
         type == DType::Q4_K || type == DType::Q6_K;
}

namespace {

// Eight rows' blocks b -> one x8 block: scales (and mins) side by side, then
// the quants four bytes of each row at a time.
template <class Plain, class X8, bool kMin, bool kHigh = false, bool kK = false>
void interleave_group(const uint8_t* src, size_t row_bytes, int64_t nb, uint8_t* dst) {
  constexpr int kQsBytes = sizeof(Plain::qs);
  for (int64_t b = 0; b < nb; ++b) {
    X8 out;
    for (int r = 0; r < 8; ++r) {
      const Plain& in = reinterpret_cast<const Plain*>(src + r * row_bytes)[b];
      out.d[r] = in.d;
      if constexpr (kMin) out.m[r] = in.m;
      if constexpr (kK) {
        out.dmin[r] = in.dmin;
        for (int i = 0; i < 12; ++i) out.scales[8 * i + r] = in.scales[i];
      }
      if constexpr (kHigh) out.qh[r] = load_u32_le(in.qh);
      for (int c = 0; c < kQsBytes / 4; ++c) std::memcpy(&out.qs[32 * c + 4 * r], &in.qs[4 * c], 4);
    }
    std::memcpy(dst + b * sizeof(X8), &out, sizeof(X8));
  }
}

void interleave_q6_k(const uint8_t* src, size_t row_bytes, int64_t nb, uint8_t* dst) {
  for (int64_t b = 0; b < nb; ++b) {
    BlockQ6_Kx8 out;
    for (int r = 0; r < 8; ++r) {
      const BlockQ6_K& in = reinterpret_cast<const BlockQ6_K*>(src + r * row_bytes)[b];
      out.d[r] = in.d;
      for (int g = 0; g < 16; ++g) out.scales[8 * g + r] = in.scales[g];
      for (int c = 0; c < 32; ++c) std::memcpy(&out.ql[32 * c + 4 * r], &in.ql[4 * c], 4);
      for (int c = 0; c < 16; ++c) std::memcpy(&out.qh[32 * c + 4 * r], &in.qh[4 * c], 4);
    }
    std::memcpy(dst + b * sizeof(out), &out, sizeof(out));
  }
}

}  // namespace

void interleave_rows(DType type, const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) {
  if (!interleavable(type)) fail("internal: no x8 layout for {}", dtype_info(type).name);
  const size_t row = row_bytes(type, cols);
  const int64_t nb = cols / dtype_info(type).block_size, groups = rows / 8;
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* s = src + g * 8 * row;
    uint8_t* d = dst + g * 8 * row;
    switch (type) {
      case DType::Q4_0: interleave_group<BlockQ4_0, BlockQ4_0x8, false>(s, row, nb, d); break;
      case DType::Q4_1: interleave_group<BlockQ4_1, BlockQ4_1x8, true>(s, row, nb, d); break;
      case DType::Q5_0: interleave_group<BlockQ5_0, BlockQ5_0x8, false, true>(s, row, nb, d); break;
      case DType::Q4_K: interleave_group<BlockQ4_K, BlockQ4_Kx8, false, false, true>(s, row, nb, d); break;
      case DType::Q6_K: interleave_q6_k(s, row, nb, d); break;
      default: interleave_group<BlockQ8_0, BlockQ8_0x8, false>(s, row, nb, d); break;
    }
  }
  std::memcpy(dst + groups * 8 * row, src + groups * 8 * row, (rows - groups * 8) * row);  // the plain tail
}

}  // namespace shoal
