// Scalar dot products, written plainly from the layouts in blocks.h: the
// reference the SIMD kernels (vec_dot.cpp) are tested against, and the path
// for types that have no SIMD kernel yet.
//
// Like ggml, each block's products are summed exactly in integers and scaled
// once: sum += (d_w * d_a) * sum_j(q_w[j] * q_a[j]). Blocks are visited in
// order and summed into one float.
#include <cstring>
#include <type_traits>

#include "tensor/blocks.h"
#include "tensor/dequantize.h"
#include "tensor/vec_dot.h"
#include "util/error.h"

namespace shoal {
namespace {

float dot_f32(const uint8_t* w, const float* a, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    float x;
    std::memcpy(&x, w + 4 * i, 4);
    sum += x * a[i];
  }
  return sum;
}

template <float (*Convert)(uint16_t)>
float dot_half(const uint8_t* w, const float* a, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, w + 2 * i, 2);
    sum += Convert(h) * a[i];
  }
  return sum;
}

// The 32 quant values of a 32-block as integers (before scale and offset).
void unpack_nibbles(const uint8_t* qs, int* q) {
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = qs[j] & 0xF;
    q[j + kQK / 2] = qs[j] >> 4;
  }
}

void add_fifth_bit(const uint8_t* qh_bytes, int* q) {
  const uint32_t qh = load_u32_le(qh_bytes);
  for (int j = 0; j < kQK; ++j) q[j] |= static_cast<int>((qh >> j) & 1) << 4;
}

// sum_j q[j] * a[j] for one 32-block, and sum_j a[j] for the *_1 min term.
int block_dot(const int* q, const BlockQ8_0& a) {
  int s = 0;
  for (int j = 0; j < kQK; ++j) s += q[j] * a.qs[j];
  return s;
}
int block_sum(const BlockQ8_0& a) {
  int s = 0;
  for (int j = 0; j < kQK; ++j) s += a.qs[j];
  return s;
}

// MXFP4: x = 2^(e - 128) * kMxfp4Values[q].
float dot_mxfp4(const BlockMXFP4* w, const BlockQ8_0* a, int64_t nb) {
  float sum = 0.0f;
  int q[kQK];
  for (int64_t i = 0; i < nb; ++i) {
    unpack_nibbles(w[i].qs, q);
    for (int j = 0; j < kQK; ++j) q[j] = kMxfp4Values[q[j]];
    sum += e8m0_half(w[i].e) * half_to_float(a[i].d) * static_cast<float>(block_dot(q, a[i]));
  }
  return sum;
}

// Q4_0/Q5_0/Q8_0: x = d * (q - offset).
template <typename Block>
float dot_q_sym(const Block* w, const BlockQ8_0* a, int64_t nb, int offset) {
  float sum = 0.0f;
  int q[kQK];
  for (int64_t i = 0; i < nb; ++i) {
    if constexpr (std::is_same_v<Block, BlockQ8_0>) {
      for (int j = 0; j < kQK; ++j) q[j] = w[i].qs[j];
    } else {
      unpack_nibbles(w[i].qs, q);
      if constexpr (std::is_same_v<Block, BlockQ5_0>) add_fifth_bit(w[i].qh, q);
    }
    for (int j = 0; j < kQK; ++j) q[j] -= offset;
    sum += half_to_float(w[i].d) * half_to_float(a[i].d) * static_cast<float>(block_dot(q, a[i]));
  }
  return sum;
}

// Q4_1/Q5_1: x = d * q + m, so sum x*a = d*da*sum(q*qa) + m*da*sum(qa).
template <typename Block>
float dot_q_affine(const Block* w, const BlockQ8_0* a, int64_t nb) {
  float sum = 0.0f;
  int q[kQK];
  for (int64_t i = 0; i < nb; ++i) {
    unpack_nibbles(w[i].qs, q);
    if constexpr (std::is_same_v<Block, BlockQ5_1>) add_fifth_bit(w[i].qh, q);
    const float da = half_to_float(a[i].d);
    sum += half_to_float(w[i].d) * da * static_cast<float>(block_dot(q, a[i]));
    sum += half_to_float(w[i].m) * da * static_cast<float>(block_sum(a[i]));
  }
  return sum;
}

float dot_q2_k(const BlockQ2_K* w, const BlockQ8_K* a, int64_t nb) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int isum = 0, msum = 0;
    for (int e = 0; e < kQKK; ++e) {
      const int n = e / 128, j = (e % 128) / 32, l = e % 32;
      const int q = (w[i].qs[32 * n + l] >> (2 * j)) & 3;
      isum += (w[i].scales[e / 16] & 0xF) * q * a[i].qs[e];
    }
    for (int g = 0; g < 16; ++g) msum += (w[i].scales[g] >> 4) * a[i].bsums[g];
    sum += a[i].d * half_to_float(w[i].d) * static_cast<float>(isum);
    sum -= a[i].d * half_to_float(w[i].dmin) * static_cast<float>(msum);
  }
  return sum;
}

float dot_q3_k(const BlockQ3_K* w, const BlockQ8_K* a, int64_t nb) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int isum = 0;
    for (int e = 0; e < kQKK; ++e) {
      const int n = e / 128, j = (e % 128) / 32, l = e % 32;
      const int low = (w[i].qs[32 * n + l] >> (2 * j)) & 3;
      const bool high = (w[i].hmask[l] >> (4 * n + j)) & 1;
      isum += q3k_scale(w[i].scales, e / 16) * (low - (high ? 0 : 4)) * a[i].qs[e];
    }
    sum += a[i].d * half_to_float(w[i].d) * static_cast<float>(isum);
  }
  return sum;
}

// Q4_K and Q5_K: 8 sub-blocks of 32 with a scale and a min each.
template <typename Block>
float dot_q45_k(const Block* w, const BlockQ8_K* a, int64_t nb) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int isum = 0, msum = 0;
    for (int s = 0; s < 8; ++s) {
      int scale, min;
      kquant_scale_min(w[i].scales, s, scale, min);
      const int j = s / 2;  // byte run 32j.. holds sub-blocks 2j (low) and 2j+1 (high)
      int sub = 0;
      for (int l = 0; l < 32; ++l) {
        int q = (s % 2 == 0) ? (w[i].qs[32 * j + l] & 0xF) : (w[i].qs[32 * j + l] >> 4);
        if constexpr (std::is_same_v<Block, BlockQ5_K>) q |= ((w[i].qh[l] >> s) & 1) << 4;
        sub += q * a[i].qs[32 * s + l];
      }
      isum += scale * sub;
      msum += min * (a[i].bsums[2 * s] + a[i].bsums[2 * s + 1]);
    }
    sum += a[i].d * half_to_float(w[i].d) * static_cast<float>(isum);
    sum -= a[i].d * half_to_float(w[i].dmin) * static_cast<float>(msum);
  }
  return sum;
}

float dot_q6_k(const BlockQ6_K* w, const BlockQ8_K* a, int64_t nb) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int isum = 0;
    for (int n = 0; n < 2; ++n) {
      const int8_t* sc = w[i].scales + 8 * n;
      const int8_t* qa = a[i].qs + 128 * n;
      for (int l = 0; l < 32; ++l) {
        const int g = l / 16;
        int q[4];
        q6k_quants(w[i], n, l, q);
        isum += sc[g] * q[0] * qa[l] + sc[g + 2] * q[1] * qa[l + 32] + sc[g + 4] * q[2] * qa[l + 64] +
                sc[g + 6] * q[3] * qa[l + 96];
      }
    }
    sum += a[i].d * half_to_float(w[i].d) * static_cast<float>(isum);
  }
  return sum;
}

}  // namespace

float vec_dot_reference(DType weight, const void* weight_row, const void* activation, int64_t n) {
  const DTypeInfo& info = dtype_info(weight);
  if (n < 0 || n % info.block_size != 0)
    fail("vec_dot: {} values is not a whole number of {} blocks", n, info.name);
  const int64_t nb = n / info.block_size;
  const auto* w = static_cast<const uint8_t*>(weight_row);
  const auto* a8 = static_cast<const BlockQ8_0*>(activation);
  const auto* ak = static_cast<const BlockQ8_K*>(activation);
  const auto* af = static_cast<const float*>(activation);
  switch (weight) {
    case DType::F32: return dot_f32(w, af, n);
    case DType::F16: return dot_half<half_to_float>(w, af, n);
    case DType::BF16: return dot_half<bf16_to_f32>(w, af, n);
    case DType::Q4_0: return dot_q_sym(reinterpret_cast<const BlockQ4_0*>(w), a8, nb, 8);
    case DType::MXFP4: return dot_mxfp4(reinterpret_cast<const BlockMXFP4*>(w), a8, nb);
    case DType::Q5_0: return dot_q_sym(reinterpret_cast<const BlockQ5_0*>(w), a8, nb, 16);
    case DType::Q8_0: return dot_q_sym(reinterpret_cast<const BlockQ8_0*>(w), a8, nb, 0);
    case DType::Q4_1: return dot_q_affine(reinterpret_cast<const BlockQ4_1*>(w), a8, nb);
    case DType::Q5_1: return dot_q_affine(reinterpret_cast<const BlockQ5_1*>(w), a8, nb);
    case DType::Q2_K: return dot_q2_k(reinterpret_cast<const BlockQ2_K*>(w), ak, nb);
    case DType::Q3_K: return dot_q3_k(reinterpret_cast<const BlockQ3_K*>(w), ak, nb);
    case DType::Q4_K: return dot_q45_k(reinterpret_cast<const BlockQ4_K*>(w), ak, nb);
    case DType::Q5_K: return dot_q45_k(reinterpret_cast<const BlockQ5_K*>(w), ak, nb);
    case DType::Q6_K: return dot_q6_k(reinterpret_cast<const BlockQ6_K*>(w), ak, nb);
    default: break;
  }
  fail("vec_dot: weight type {} is not supported", info.name);
}

}  // namespace shoal
