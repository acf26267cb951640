#pragma once
// The quantized block layouts of GGUF (ggml), byte for byte. A row of a
// quantized tensor is a run of these blocks, back to back, with no padding.
//
// Halves (f16 scales) are kept as their raw bits (uint16_t). The structs are
// packed to alignment 1: blocks of 18 or 34 bytes sit at odd addresses in a
// row, and callers may hand us any pointer.
#include <cstdint>
#include <cstring>

namespace shoal {

inline constexpr int kQK = 32;    // values per block of the 32-block types
inline constexpr int kQKK = 256;  // values per super-block of the K-quants

#pragma pack(push, 1)

// x[j] = d * (q[j] - 8); q[j] is the low nibble of qs[j] for j < 16, the
// high nibble of qs[j - 16] otherwise.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};

// x[j] = d * q[j] + m; nibbles as in Q4_0.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};

// x[j] = d * (q[j] - 16); q[j] = nibble as in Q4_0 | (bit j of qh) << 4.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // little-endian u32, bit j = fifth bit of value j
  uint8_t qs[kQK / 2];
};

// x[j] = d * q[j] + m; q[j] as in Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};

// x[j] = d * qs[j]. Also the activation format for the 32-block types.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};

// Activation format for the K-quants: x[j] = d * qs[j]; bsums[g] is the sum
// of qs[16g .. 16g+15], so the K-quants' min terms need no pass over qs.
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};

// 16 groups of 16 values. scales[g]: low nibble = scale, high nibble = min.
// Value e = 128n + 32j + l (n < 2, j < 4, l < 32) is
// (qs[32n + l] >> 2j) & 3, in group g = e / 16;
// x[e] = d * (scales[g] & 15) * q - dmin * (scales[g] >> 4).
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d;
  uint16_t dmin;
};

// 16 groups of 16 values with signed 6-bit scales (stored +32) packed in 12
// bytes. Value e = 128n + 32j + l: low bits (qs[32n + l] >> 2j) & 3, high
// bit = hmask[l] bit (4n + j); q = low - (high ? 0 : 4) in [-4, 3];
// x[e] = d * (scale[e / 16] - 32) * q.
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  uint16_t d;
};

// 8 sub-blocks of 32 values with 6-bit scales and mins packed in 12 bytes.
// Value e = 64j + l (l < 32): low nibble of qs[32j + l], sub-block 2j;
// e = 64j + 32 + l: high nibble, sub-block 2j + 1.
// x[e] = d * scale[s] * q - dmin * min[s].
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};

// Q4_K plus a fifth bit: value 64j + l takes bit 2j of qh[l], value
// 64j + 32 + l takes bit 2j + 1 of qh[l].
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};

// 16 groups of 16 values with int8 scales; q in [-32, 31].
// Per half n (128 values; ql += 64, qh += 32 per half), l < 32:
//   value l      = (ql[l]      & 15) | ((qh[l] >> 0) & 3) << 4
//   value l + 32 = (ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4
//   value l + 64 = (ql[l]      >> 4) | ((qh[l] >> 4) & 3) << 4
//   value l + 96 = (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4
// each minus 32; x[e] = d * scales[e / 16] * q.
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};

// MXFP4 (gpt-oss's experts): x[j] = kMxfp4Values[q[j]] * 2^(e - 128), q[j]
// a nibble as in Q4_0: an E2M1 float doubled (so that it is an integer)
// under a shared power-of-two scale (E8M0) halved to match.
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[kQK / 2];
};

#pragma pack(pop)

inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// 2^(e - 128) as ggml's e8m0_to_fp32_half: exact, subnormal below e = 2.
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(alignof(BlockQ8_K) == 1);

// IEEE half -> float, exact for every input (subnormals, inf, NaN).
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf / NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);  // rebias 15 -> 127
  } else {
    // Zero or subnormal: mant * 2^-24, exact in float.
    float f = static_cast<float>(mant) * 5.9604644775390625e-8f;
    std::memcpy(&bits, &f, 4);
    bits |= sign;
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// The 6-bit scale and min of sub-block j (< 8) of a Q4_K/Q5_K block.
inline void kquant_scale_min(const uint8_t* scales, int j, int& scale, int& min) {
  if (j < 4) {
    scale = scales[j] & 63;
    min = scales[j + 4] & 63;
  } else {
    scale = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
    min = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

// The signed scale (-32..31) of group g (< 16) of a Q3_K block: the low
// nibbles live in bytes 0..7, the top two bits in bytes 8..11.
inline int q3k_scale(const uint8_t* scales, int g) {
  const int low = g < 8 ? (scales[g] & 0xF) : (scales[g - 8] >> 4);
  const int high = (scales[8 + (g & 3)] >> (2 * (g >> 2))) & 3;
  return (low | (high << 4)) - 32;
}

// Values l, l + 32, l + 64 and l + 96 (l < 32) of half n of a Q6_K block,
// each minus 32, as the layout comment above gives them.
inline void q6k_quants(const BlockQ6_K& b, int n, int l, int q[4]) {
  const uint8_t* ql = b.ql + 64 * n;
  const uint8_t qh = b.qh[32 * n + l];
  q[0] = ((ql[l] & 0xF) | (((qh >> 0) & 3) << 4)) - 32;
  q[1] = ((ql[l + 32] & 0xF) | (((qh >> 2) & 3) << 4)) - 32;
  q[2] = ((ql[l] >> 4) | (((qh >> 4) & 3) << 4)) - 32;
  q[3] = ((ql[l + 32] >> 4) | (((qh >> 6) & 3) << 4)) - 32;
}

inline uint32_t load_u32_le(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace shoal
