#pragma once
// Weights in groups of eight rows ("x8"), for the CPU matmul: block b of
// eight consecutive rows is stored as one x8 block, the eight scales side by
// side and the quants interleaved four bytes at a time, so that one 32-byte
// load holds four bytes of each row and one vpmaddubsw works on eight rows
// against one activation broadcast. Float rows interleave runs of eight
// values, so that decode reads a group as one stream rather than eight
// (one stream is what a core's prefetchers follow best). Made once at load;
// rows past the last whole group stay in the plain layout after the groups.
// Same total size.
//
// The layout changes speed only: gemm_rows gives the same bits for a matrix
// in either layout (tensor/gemm.h), so a machine may keep the plain layout
// (a worker short of memory) and still agree with the others.
#include <cstdint>
#include <vector>

#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/matrix.h"

namespace shoal {

#pragma pack(push, 1)
// qs[32c + 4r + j] = qs[4c + j] of row r (c < 4).
struct BlockQ4_0x8 {
  uint16_t d[8];
  uint8_t qs[8 * kQK / 2];
};
struct BlockQ4_1x8 {
  uint16_t d[8];
  uint16_t m[8];
  uint8_t qs[8 * kQK / 2];
};
// qs as Q4_0's; qh[4r + j] bit v = the fifth bit of row r's value 4v + j,
// i.e. of the value in byte j of lane r of the kernel's quant vector v
// (v < 4: low nibbles of qs chunk v; v >= 4: high nibbles of chunk v - 4),
// so that one shift and one mask put vector v's fifth bits in place.
struct BlockQ5_0x8 {
  uint16_t d[8];
  uint8_t qh[8 * 4];
  uint8_t qs[8 * kQK / 2];
};
// Q5_0's with Q4_1's mins.
struct BlockQ5_1x8 {
  uint16_t d[8];
  uint16_t m[8];
  uint8_t qh[8 * 4];
  uint8_t qs[8 * kQK / 2];
};
// The eight rows' scales side by side; qs as Q4_0's.
struct BlockMXFP4x8 {
  uint8_t e[8];
  uint8_t qs[8 * kQK / 2];
};
// qs[32c + 4r + j] = qs[4c + j] of row r (c < 8).
struct BlockQ8_0x8 {
  uint16_t d[8];
  int8_t qs[8 * kQK];
};
// 8 rows of Q2_K: scales[8g + r] = scales[g] of row r; qs[32c + 4r + j] =
// qs[4c + j] of row r (c < 16).
struct BlockQ2_Kx8 {
  uint16_t d[8];
  uint16_t dmin[8];
  uint8_t scales[8 * 16];
  uint8_t qs[8 * kQKK / 4];
};
// 8 rows of Q3_K: scales[8i + r] = byte i of row r's packed scales;
// hmask[32c + 4r + j] = hmask[4c + j] of row r (c < 8); qs as Q2_K's.
struct BlockQ3_Kx8 {
  uint16_t d[8];
  uint8_t scales[8 * 12];
  uint8_t hmask[8 * kQKK / 8];
  uint8_t qs[8 * kQKK / 4];
};
// 8 rows of Q4_K: scales[8i + r] = byte i of row r's packed scales and
// mins; qs[32c + 4r + j] = qs[4c + j] of row r (c < 32).
struct BlockQ4_Kx8 {
  uint16_t d[8];
  uint16_t dmin[8];
  uint8_t scales[8 * 12];
  uint8_t qs[8 * kQKK / 2];
};
// 8 rows of Q5_K: Q4_K's fields, and qh[32c + 4r + j] = qh[4c + j] of row
// r (c < 8), so one load of chunk c holds the fifth bits of every quant
// vector that shares c's byte positions.
struct BlockQ5_Kx8 {
  uint16_t d[8];
  uint16_t dmin[8];
  uint8_t scales[8 * 12];
  uint8_t qh[8 * kQKK / 8];
  uint8_t qs[8 * kQKK / 2];
};
// 8 rows of Q6_K: scales[8g + r] = scale g of row r; ql[32c + 4r + j] =
// ql[4c + j] of row r (c < 32); qh[32c + 4r + j] = qh[4c + j] of row r (c < 16).
struct BlockQ6_Kx8 {
  uint16_t d[8];
  int8_t scales[8 * 16];
  uint8_t ql[8 * kQKK / 2];
  uint8_t qh[8 * kQKK / 4];
};
#pragma pack(pop)
static_assert(sizeof(BlockQ4_0x8) == 8 * sizeof(BlockQ4_0));
static_assert(sizeof(BlockQ4_1x8) == 8 * sizeof(BlockQ4_1));
static_assert(sizeof(BlockQ5_0x8) == 8 * sizeof(BlockQ5_0));
static_assert(sizeof(BlockQ5_1x8) == 8 * sizeof(BlockQ5_1));
static_assert(sizeof(BlockQ8_0x8) == 8 * sizeof(BlockQ8_0));
static_assert(sizeof(BlockQ2_Kx8) == 8 * sizeof(BlockQ2_K));
static_assert(sizeof(BlockQ3_Kx8) == 8 * sizeof(BlockQ3_K));
static_assert(sizeof(BlockQ4_Kx8) == 8 * sizeof(BlockQ4_K));
static_assert(sizeof(BlockQ5_Kx8) == 8 * sizeof(BlockQ5_K));
static_assert(sizeof(BlockQ6_Kx8) == 8 * sizeof(BlockQ6_K));

// Float weights (F32, F16, BF16) group in runs of this many values, one
// 8-lane vector of a row (tensor/gemm_float-inl.h).
constexpr int64_t kFloatRun = 8;

// Whether rows of `cols` values of `type` have an x8 layout: every
// quantized type the matmul tiles, and float rows of whole runs.
bool interleavable(DType type, int64_t cols);

// Writes the rows x cols matrix at src (plain layout) to dst in the x8
// layout (the same number of bytes). src and dst must not overlap.
void interleave_rows(DType type, const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst);

// Row r of m in the plain layout, whichever layout m is in: m.row(r) when
// it is plain, else the row taken out of its group into scratch (an
// embedding lookup reads single rows of a grouped head).
const uint8_t* plain_row(const Matrix& m, int64_t r, std::vector<uint8_t>& scratch);

}  // namespace shoal
