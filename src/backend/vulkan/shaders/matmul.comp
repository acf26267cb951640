#version 450
// y[t][r] = W[r] · x[t] straight on the GGUF blocks (one TYPE_* per build).
// A workgroup takes four rows and up to eight tokens; each row's 16 threads
// take its 32-value chunks in turn, each keeping one fused chain per token;
// after one barrier a thread per (row, token) adds the 16 partial sums in
// lane order. A token's result is the same whatever else is in the batch.
#extension GL_GOOGLE_include_directive : enable
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Weights { uint w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Push {
  uint rows, cols, n_tokens, w_off, row_stride, x_off, y_off;
} p;

const uint TILE = 8;   // tokens per workgroup
const uint ROWS = 4;   // rows per workgroup
const uint LANES = 16; // threads per row
shared float partial[ROWS][TILE][LANES];
float v[32];

void load_chunk(uint base, uint c) {
#if defined(TYPE_F32)
  for (uint k = 0; k < 32; ++k) {
    uint i = c * 32 + k;
    v[k] = i < p.cols ? uintBitsToFloat(U32(w, base + i * 4)) : 0.0;
  }
#elif defined(TYPE_F16)
  for (uint k = 0; k < 32; ++k) {
    uint i = c * 32 + k;
    v[k] = i < p.cols ? F16(w, base + i * 2) : 0.0;
  }
#elif defined(TYPE_BF16)
  for (uint k = 0; k < 32; ++k) {
    uint i = c * 32 + k;
    v[k] = i < p.cols ? uintBitsToFloat(U16(w, base + i * 2) << 16) : 0.0;
  }
#elif defined(TYPE_Q4_0)
  uint b = base + c * 18;
  float d = F16(w, b);
  for (uint k = 0; k < 16; ++k) {
    uint q = BYTE(w, b + 2 + k);
    v[k] = (float(q & 15u) - 8.0) * d;
    v[k + 16] = (float(q >> 4) - 8.0) * d;
  }
#elif defined(TYPE_Q4_1)
  uint b = base + c * 20;
  float d = F16(w, b), m = F16(w, b + 2);
  for (uint k = 0; k < 16; ++k) {
    uint q = BYTE(w, b + 4 + k);
    v[k] = float(q & 15u) * d + m;
    v[k + 16] = float(q >> 4) * d + m;
  }
#elif defined(TYPE_Q5_0)
  uint b = base + c * 22;
  float d = F16(w, b);
  uint qh = U32(w, b + 2);
  for (uint k = 0; k < 16; ++k) {
    uint q = BYTE(w, b + 6 + k);
    v[k] = (float((q & 15u) | (((qh >> k) & 1u) << 4)) - 16.0) * d;
    v[k + 16] = (float((q >> 4) | (((qh >> (k + 16)) & 1u) << 4)) - 16.0) * d;
  }
#elif defined(TYPE_Q5_1)
  uint b = base + c * 24;
  float d = F16(w, b), m = F16(w, b + 2);
  uint qh = U32(w, b + 4);
  for (uint k = 0; k < 16; ++k) {
    uint q = BYTE(w, b + 8 + k);
    v[k] = float((q & 15u) | (((qh >> k) & 1u) << 4)) * d + m;
    v[k + 16] = float((q >> 4) | (((qh >> (k + 16)) & 1u) << 4)) * d + m;
  }
#elif defined(TYPE_Q8_0)
  uint b = base + c * 34;
  float d = F16(w, b);
  for (uint k = 0; k < 32; ++k) v[k] = float(I8(w, b + 2 + k)) * d;
#elif defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
#if defined(TYPE_Q4_K)
  const uint block_bytes = 144, qs_at = 16;
#else
  const uint block_bytes = 176, qs_at = 48;
#endif
  uint j = c % 8;
  uint b = base + (c / 8) * block_bytes;
  float d = F16(w, b), dmin = F16(w, b + 2);
  uint s = b + 4;  // 12 bytes of 6-bit scales and mins
  uint sc, mn;
  if (j < 4) {
    sc = BYTE(w, s + j) & 63u;
    mn = BYTE(w, s + j + 4) & 63u;
  } else {
    sc = (BYTE(w, s + j + 4) & 15u) | ((BYTE(w, s + j - 4) >> 6) << 4);
    mn = (BYTE(w, s + j + 4) >> 4) | ((BYTE(w, s + j) >> 6) << 4);
  }
  float d1 = d * float(sc), m1 = dmin * float(mn);
  uint qs = b + qs_at + (j / 2) * 32;
  uint shift = (j & 1u) * 4;
  for (uint l = 0; l < 32; ++l) {
    uint q = (BYTE(w, qs + l) >> shift) & 15u;
#if defined(TYPE_Q5_K)
    q |= ((BYTE(w, b + 16 + l) >> j) & 1u) << 4;
#endif
    v[l] = d1 * float(q) - m1;
  }
#elif defined(TYPE_Q6_K)
  uint j = c % 8;
  uint b = base + (c / 8) * 210;
  float d = F16(w, b + 208);
  uint half_ = j / 4, part = j % 4;
  uint ql = b + half_ * 64 + ((part & 1u) != 0u ? 32u : 0u);
  uint qh = b + 128 + half_ * 32;
  uint sc = b + 192 + half_ * 8 + part * 2;
  uint lo_shift = part >= 2u ? 4u : 0u;
  for (uint l = 0; l < 32; ++l) {
    uint q = ((BYTE(w, ql + l) >> lo_shift) & 15u) | (((BYTE(w, qh + l) >> (2u * part)) & 3u) << 4);
    v[l] = d * float(I8(w, sc + l / 16)) * (float(q) - 32.0);
  }
#else
#error "matmul.comp needs a TYPE_* define"
#endif
}

void main() {
  const uint lane = gl_LocalInvocationID.x % LANES;      // this thread's share of its row
  const uint local_row = gl_LocalInvocationID.x / LANES;  // which of the workgroup's rows
  // Row groups past the device's x limit (a vocabulary head) continue in z.
  const uint row_group = gl_WorkGroupID.z * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint r = row_group * ROWS + local_row;
  const uint t0 = gl_WorkGroupID.y * TILE;
  const uint nt = min(TILE, p.n_tokens - t0);
  float acc[TILE];
  for (uint t = 0; t < TILE; ++t) acc[t] = 0.0;
  if (r < p.rows) {
    const uint base = p.w_off + r * p.row_stride;
    const uint chunks = (p.cols + 31) / 32;
    for (uint c = lane; c < chunks; c += LANES) {
      load_chunk(base, c);
      // A float row's last chunk may be short: its missing weights are 0
      // and its activations are read at the row's last value instead.
      const uint last = p.cols - 1 - c * 32;
      for (uint t = 0; t < nt; ++t) {
        const uint xb = p.x_off + (t0 + t) * p.cols + c * 32;
        float a = acc[t];
        for (uint k = 0; k < 32; ++k) a = fma(v[k], x[xb + min(k, last)], a);
        acc[t] = a;
      }
    }
  }
  for (uint t = 0; t < TILE; ++t) partial[local_row][t][lane] = acc[t];
  barrier();
  // One thread per (row, token) adds its row's lanes in lane order.
  const uint out_row = gl_LocalInvocationID.x / TILE, t = gl_LocalInvocationID.x % TILE;
  const uint ro = row_group * ROWS + out_row;
  if (out_row < ROWS && t < nt && ro < p.rows) {
    float sum = 0.0;
    for (uint l = 0; l < LANES; ++l) sum += partial[out_row][t][l];
    y[p.y_off + (t0 + t) * p.rows + ro] = sum;
  }
}
