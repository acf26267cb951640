#version 450
// Causal attention for one token and a block of GB query heads that share a
// KV head, per workgroup: the visible positions in fixed chunks of 64
// counted from the first one, one position per thread for the scores, an
// online softmax per head merged chunk after chunk in order, each thread
// keeping its share of the output dimensions. Each K and V value is read
// once for the block's heads (a GQA group shares them). A head's arithmetic
// is the same whatever block it is in, so its result depends only on its
// query and the cache.
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
  uint block_heads;  // GB: heads per workgroup, dividing the GQA group, GB x head_dim <= 2048
} p;

const uint MAX_DIMS = 8;  // head_dim <= 512
const uint MAX_G = 8;     // GB <= 8
shared float qv[2048];
shared float weights[MAX_G][64];
shared float partial[MAX_G][64];

uint slot(int pos) { return p.ring > 0u ? uint(pos) % p.ring : uint(pos); }

void main() {
  const uint t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint GB = p.block_heads, hd = p.head_dim;
  const uint h0 = gl_WorkGroupID.x * GB;
  const int seq = rows[t], pos = rows[p.pos_off + t];
  const uint kh = h0 / (p.n_head / p.n_head_kv);
  for (uint g = 0; g < GB; ++g) {
    const uint qb = p.q_off + (t * p.n_head + h0 + g) * hd;
    for (uint d = tid; d < hd; d += 64) qv[g * hd + d] = q[qb + d];
  }
  barrier();
  if (p.k_type == KV_Q8_0) {
    // As on the CPU (and in ggml), a query meets a Q8_0 key in Q8_0: each
    // block of 32 rounded with its f16 scale.
    for (uint block = tid * 32; block < GB * hd; block += 64 * 32) {
      float amax = 0.0;
      for (uint i = 0; i < 32; ++i) amax = max(amax, abs(qv[block + i]));
      const float d = unpackHalf2x16(packHalf2x16(vec2(amax / 127.0, 0.0))).x;
      const float id = amax != 0.0 ? 127.0 / amax : 0.0;
      for (uint i = 0; i < 32; ++i) qv[block + i] = roundEven(qv[block + i] * id) * d;
    }
    barrier();
  }

  const int first = p.window > 0u ? max(0, pos - int(p.window) + 1) : 0;
  float m[MAX_G], l[MAX_G], m_new[MAX_G], score[MAX_G];
  float acc[MAX_G][MAX_DIMS];
  for (uint g = 0; g < MAX_G; ++g) {
    m[g] = -1.0 / 0.0;
    l[g] = 0.0;
    for (uint i = 0; i < MAX_DIMS; ++i) acc[g][i] = 0.0;
  }
  const uint k_base = p.k_off + uint(seq) * p.k_seq_stride, v_base = p.v_off + uint(seq) * p.v_seq_stride;
  for (int start = first; start <= pos; start += 64) {
    const int j = start + int(tid);
    for (uint g = 0; g < MAX_G; ++g) score[g] = -1.0 / 0.0;
    if (j <= pos) {
      const uint row = k_base + slot(j) * p.k_row_bytes;
      float s[MAX_G];
      for (uint g = 0; g < MAX_G; ++g) s[g] = 0.0;
      for (uint d = 0; d < hd; ++d) {
        const float kd = KV_VALUE(k, p.k_type, row, kh * hd + d);
        for (uint g = 0; g < GB; ++g) s[g] = fma(qv[g * hd + d], kd, s[g]);
      }
      for (uint g = 0; g < GB; ++g) score[g] = s[g] * p.scale;
    }
    for (uint g = 0; g < GB; ++g) partial[g][tid] = score[g];
    barrier();
    for (uint s = 32; s > 0; s >>= 1) {
      if (tid < s)
        for (uint g = 0; g < GB; ++g) partial[g][tid] = max(partial[g][tid], partial[g][tid + s]);
      barrier();
    }
    for (uint g = 0; g < GB; ++g) m_new[g] = max(m[g], partial[g][0]);
    barrier();
    for (uint g = 0; g < GB; ++g) {
      const float wgt = j <= pos ? exp(score[g] - m_new[g]) : 0.0;
      weights[g][tid] = wgt;
      partial[g][tid] = wgt;
    }
    barrier();
    for (uint s = 32; s > 0; s >>= 1) {
      if (tid < s)
        for (uint g = 0; g < GB; ++g) partial[g][tid] += partial[g][tid + s];
      barrier();
    }
    float rescale[MAX_G];
    for (uint g = 0; g < GB; ++g) {
      rescale[g] = exp(m[g] - m_new[g]);
      l[g] = l[g] * rescale[g] + partial[g][0];
    }
    const int n = min(64, pos - start + 1);
    for (uint i = 0; i < MAX_DIMS; ++i) {
      const uint d = tid + i * 64;
      if (d >= hd) break;
      float a[MAX_G];
      for (uint g = 0; g < GB; ++g) a[g] = acc[g][i] * rescale[g];
      for (int jj = 0; jj < n; ++jj) {
        const float vd = KV_VALUE(v, p.v_type, v_base + slot(start + jj) * p.v_row_bytes, kh * hd + d);
        for (uint g = 0; g < GB; ++g) a[g] = fma(weights[g][jj], vd, a[g]);
      }
      for (uint g = 0; g < GB; ++g) acc[g][i] = a[g];
    }
    for (uint g = 0; g < GB; ++g) m[g] = m_new[g];
    barrier();
  }
  for (uint g = 0; g < GB; ++g) {
    const uint ob = p.o_off + (t * p.n_head + h0 + g) * hd;
    for (uint i = 0; i < MAX_DIMS; ++i) {
      const uint d = tid + i * 64;
      if (d < hd) o[ob + d] = acc[g][i] / l[g];
    }
  }
}
