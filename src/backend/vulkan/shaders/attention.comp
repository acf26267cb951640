#version 450
// Causal attention for one (head, token) per workgroup: the visible
// positions in fixed chunks of 64 counted from the first one, one position
// per thread for the scores, an online softmax merged chunk after chunk in
// order, each thread keeping its share of the output dimensions. The result
// depends only on the query and the cache.
#extension GL_GOOGLE_include_directive : enable
#include "common.glsl"
#include "kv.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { uint k[]; };
layout(std430, binding = 2) readonly buffer V { uint v[]; };
layout(std430, binding = 3) readonly buffer Rows { int rows[]; };  // seq ids, then positions
layout(std430, binding = 4) writeonly buffer Out { float o[]; };
layout(push_constant) uniform Push {
  uint n_head, n_head_kv, head_dim, window, q_off, o_off, k_off, v_off;
  uint k_row_bytes, v_row_bytes, k_seq_stride, v_seq_stride, ring, k_type, v_type, pos_off;
  float scale;
} p;

const uint MAX_DIMS = 8;  // head_dim <= 512
shared float qv[512];
shared float weights[64];
shared float partial[64];

uint slot(int pos) { return p.ring > 0u ? uint(pos) % p.ring : uint(pos); }

void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const int seq = rows[t], pos = rows[p.pos_off + t];
  const uint kh = h / (p.n_head / p.n_head_kv);
  const uint qb = p.q_off + (t * p.n_head + h) * p.head_dim;
  for (uint d = tid; d < p.head_dim; d += 64) qv[d] = q[qb + d];
  barrier();
  if (p.k_type == KV_Q8_0) {
    // As on the CPU (and in ggml), a query meets a Q8_0 key in Q8_0: each
    // block of 32 rounded with its f16 scale.
    const uint block = tid * 32;
    if (block < p.head_dim) {
      float amax = 0.0;
      for (uint i = 0; i < 32; ++i) amax = max(amax, abs(qv[block + i]));
      const float d = unpackHalf2x16(packHalf2x16(vec2(amax / 127.0, 0.0))).x;
      const float id = amax != 0.0 ? 127.0 / amax : 0.0;
      for (uint i = 0; i < 32; ++i) qv[block + i] = roundEven(qv[block + i] * id) * d;
    }
    barrier();
  }

  const int first = p.window > 0u ? max(0, pos - int(p.window) + 1) : 0;
  float m = -1.0 / 0.0, l = 0.0;
  float acc[MAX_DIMS];
  for (uint i = 0; i < MAX_DIMS; ++i) acc[i] = 0.0;
  for (int start = first; start <= pos; start += 64) {
    const int j = start + int(tid);
    float score = -1.0 / 0.0;
    if (j <= pos) {
      const uint row = p.k_off + uint(seq) * p.k_seq_stride + slot(j) * p.k_row_bytes;
      float s = 0.0;
      for (uint d = 0; d < p.head_dim; ++d) s = fma(qv[d], KV_VALUE(k, p.k_type, row, kh * p.head_dim + d), s);
      score = s * p.scale;
    }
    partial[tid] = score;
    barrier();
    for (uint s = 32; s > 0; s >>= 1) {
      if (tid < s) partial[tid] = max(partial[tid], partial[tid + s]);
      barrier();
    }
    const float m_new = max(m, partial[0]);
    barrier();
    const float wgt = j <= pos ? exp(score - m_new) : 0.0;
    weights[tid] = wgt;
    partial[tid] = wgt;
    barrier();
    for (uint s = 32; s > 0; s >>= 1) {
      if (tid < s) partial[tid] += partial[tid + s];
      barrier();
    }
    const float rescale = exp(m - m_new);
    l = l * rescale + partial[0];
    const int n = min(64, pos - start + 1);
    for (uint i = 0; i < MAX_DIMS; ++i) {
      const uint d = tid + i * 64;
      if (d >= p.head_dim) break;
      float a = acc[i] * rescale;
      for (int jj = 0; jj < n; ++jj) {
        const uint row = p.v_off + uint(seq) * p.v_seq_stride + slot(start + jj) * p.v_row_bytes;
        a = fma(weights[jj], KV_VALUE(v, p.v_type, row, kh * p.head_dim + d), a);
      }
      acc[i] = a;
    }
    m = m_new;
    barrier();
  }
  const uint ob = p.o_off + (t * p.n_head + h) * p.head_dim;
  for (uint i = 0; i < MAX_DIMS; ++i) {
    const uint d = tid + i * 64;
    if (d < p.head_dim) o[ob + d] = acc[i] / l;
  }
}
