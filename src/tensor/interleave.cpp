#include "tensor/interleave.h"

#include <cstring>

#include "util/error.h"

namespace shoal {

bool interleavable(DType type, int64_t cols) {
  // Every weight type has groups of eight; float rows whole runs only (no zero-padded tail in a group).
  const DTypeInfo& info = dtype_info(type);
  return info.weight && (info.block_size > 1 || cols % kFloatRun == 0);
}

namespace {

// Row r's block between its plain form and its place in an x8 block; the
// direction is a template argument, so each layout is described once and
// the two ways cannot drift apart. (Fields of packed blocks take no
// references: MOVE assigns.)
#define MOVE(plain, x8)       \
  {                           \
    if constexpr (kToX8) {    \
      (x8) = (plain);         \
    } else {                  \
      (plain) = (x8);         \
    }                         \
  }
template <bool kToX8>
void move_bytes(void* plain, void* x8, size_t n) {
  if constexpr (kToX8) std::memcpy(x8, plain, n); else std::memcpy(plain, x8, n);
}
// Bit i of the plain bytes to or from bit j of the x8 byte.
template <bool kToX8>
void move_bit(uint8_t* plain, int i, uint8_t& x8, int j) {
  uint8_t& to = kToX8 ? x8 : plain[i / 8];
  const int from_bit = kToX8 ? i % 8 : j, to_bit = kToX8 ? j : i % 8;
  const int bit = ((kToX8 ? plain[i / 8] : x8) >> from_bit) & 1;
  to = static_cast<uint8_t>((to & ~(1 << to_bit)) | (bit << to_bit));
}

// Each row's scalars side by side (scales[8i + r] = byte i of row r's
// scales), then the quant and bit planes four bytes of each row at a time;
// kFifthBits: Q5_0's and Q5_1's qh bit by bit (interleave.h).
template <class Plain, class X8, bool kFifthBits = false>
struct GroupLayout {
  using P = Plain;
  using X = X8;
  template <bool kToX8>
  static void move_row(P& in, X& out, int r) {
    auto planes = [&](auto& plain, auto& x8) {
      for (size_t c = 0; c < sizeof(plain) / 4; ++c) move_bytes<kToX8>(&plain[4 * c], &x8[32 * c + 4 * r], 4);
    };
    if constexpr (requires { in.d; }) MOVE(in.d, out.d[r]);
    if constexpr (requires { in.e; }) MOVE(in.e, out.e[r]);
    if constexpr (requires { in.m; }) MOVE(in.m, out.m[r]);
    if constexpr (requires { in.dmin; }) MOVE(in.dmin, out.dmin[r]);
    if constexpr (requires { in.scales; })
      for (size_t i = 0; i < sizeof(in.scales); ++i) MOVE(in.scales[i], out.scales[8 * i + r]);
    if constexpr (kFifthBits) {  // value i's fifth bit: byte i % 4 of lane r, bit i / 4
      for (int i = 0; i < kQK; ++i) move_bit<kToX8>(in.qh, i, out.qh[4 * r + i % 4], i / 4);
    } else if constexpr (requires { in.qh; }) {
      planes(in.qh, out.qh);
    }
    if constexpr (requires { in.hmask; }) planes(in.hmask, out.hmask);
    if constexpr (requires { in.ql; }) planes(in.ql, out.ql);
    if constexpr (requires { in.qs; }) planes(in.qs, out.qs);
  }
};

#undef MOVE

// Float weights: x8 block c holds run c (kFloatRun values) of each of the
// eight rows in turn, so that a group's rows are one stream of memory and
// each 8-lane load is still one row's next run.
template <size_t kBytes>
struct FloatLayout {
  struct P {
    uint8_t v[kFloatRun * kBytes];
  };
  struct X {
    uint8_t v[8 * kFloatRun * kBytes];
  };
  template <bool kToX8>
  static void move_row(P& in, X& out, int r) {
    move_bytes<kToX8>(in.v, &out.v[r * sizeof(P)], sizeof(P));
  }
};

// fn(Layout{}) with the layout of `type`.
template <class Fn>
void with_layout(DType type, Fn&& fn) {
  switch (type) {
    case DType::Q4_0: return fn(GroupLayout<BlockQ4_0, BlockQ4_0x8>{});
    case DType::Q4_1: return fn(GroupLayout<BlockQ4_1, BlockQ4_1x8>{});
    case DType::Q5_0: return fn(GroupLayout<BlockQ5_0, BlockQ5_0x8, true>{});
    case DType::Q5_1: return fn(GroupLayout<BlockQ5_1, BlockQ5_1x8, true>{});
    case DType::Q8_0: return fn(GroupLayout<BlockQ8_0, BlockQ8_0x8>{});
    case DType::MXFP4: return fn(GroupLayout<BlockMXFP4, BlockMXFP4x8>{});
    case DType::Q2_K: return fn(GroupLayout<BlockQ2_K, BlockQ2_Kx8>{});
    case DType::Q3_K: return fn(GroupLayout<BlockQ3_K, BlockQ3_Kx8>{});
    case DType::Q4_K: return fn(GroupLayout<BlockQ4_K, BlockQ4_Kx8>{});
    case DType::Q5_K: return fn(GroupLayout<BlockQ5_K, BlockQ5_Kx8>{});
    case DType::Q6_K: return fn(GroupLayout<BlockQ6_K, BlockQ6_Kx8>{});
    case DType::F32: return fn(FloatLayout<4>{});
    case DType::F16:
    case DType::BF16: return fn(FloatLayout<2>{});
    default: fail("internal: no x8 layout for {}", dtype_info(type).name);
  }
}

}  // namespace

void interleave_rows(DType type, const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) {
  if (!interleavable(type, cols)) fail("internal: no x8 layout for {} rows of {}", dtype_info(type).name, cols);
  const size_t row = row_bytes(type, cols);
  const int64_t groups = rows / 8;
  with_layout(type, [&](auto layout) {
    using L = decltype(layout);
    const int64_t nb = static_cast<int64_t>(row / sizeof(typename L::P));
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t b = 0; b < nb; ++b) {
        typename L::X out{};
        for (int r = 0; r < 8; ++r) {
          typename L::P in;
          std::memcpy(&in, src + (g * 8 + r) * row + b * sizeof(in), sizeof(in));
          L::template move_row<true>(in, out, r);
        }
        std::memcpy(dst + g * 8 * row + b * sizeof(out), &out, sizeof(out));
      }
  });
  std::memcpy(dst + groups * 8 * row, src + groups * 8 * row, (rows - groups * 8) * row);  // the plain tail
}

const uint8_t* plain_row(const Matrix& m, int64_t r, std::vector<uint8_t>& scratch) {
  if (!m.interleaved || r >= m.rows / 8 * 8) return m.row(r);  // plain, or in the plain tail
  const size_t row = m.row_stride();
  const uint8_t* group = m.data + (r / 8) * 8 * row;
  scratch.resize(row);
  with_layout(m.type, [&](auto layout) {
    using L = decltype(layout);
    const int64_t nb = static_cast<int64_t>(row / sizeof(typename L::P));
    for (int64_t b = 0; b < nb; ++b) {
      typename L::X x;
      typename L::P out{};
      std::memcpy(&x, group + b * sizeof(x), sizeof(x));
      L::template move_row<false>(out, x, static_cast<int>(r % 8));
      std::memcpy(scratch.data() + b * sizeof(out), &out, sizeof(out));
    }
  });
  return scratch.data();
}

}  // namespace shoal
