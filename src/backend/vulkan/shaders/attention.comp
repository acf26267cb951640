#version 450
// Causal attention for TQ tokens of one sequence and a block of GB query
// heads that share a KV head, per workgroup (a row: a token and a head; up
// to 8 rows): the visible positions in fixed chunks of 64 counted from the
// first one, one position per thread for the scores, an online softmax per
// row merged chunk after chunk in order, each thread keeping its share of
// the output dimensions. Each K and V value is read once for the rows. A
// row skips the chunks past its position and masks the positions past it,
// so its arithmetic is what it would be alone and its result depends only
// on its query and the cache. Several tokens share a workgroup only without
// a window (their chunks all count from position 0). With sinks (gpt-oss)
// each head's sink logit joins the softmax's denominator, as on the CPU.
// V heads of v_dim values: head_dim, or under latent attention the latent
// at the front of the K row (V is then read from the K cache).
// The positions go in splits of SPLIT_POSITIONS from a row's first, each
// split's softmax partial merged into the row's total in order
// (attention_merge.glsl). With p.split a workgroup takes one split
// (gl_WorkGroupID.z) and leaves its partial in `parts`, and
// attention_combine.comp merges them (flash-decoding: a long context's
// decode step on many workgroups, not one); without, it walks them all.
// The same operations in the same order either way: the same bits.
#extension GL_GOOGLE_include_directive : enable
#include "common.glsl"
#include "kv.glsl"
#include "attention_merge.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { uint k[]; };
layout(std430, binding = 2) readonly buffer V { uint v[]; };
layout(std430, binding = 3) readonly buffer Rows { int rows[]; };  // seq ids, then positions
layout(std430, binding = 4) writeonly buffer Out { float o[]; };
layout(std430, binding = 5) readonly buffer Sinks { float sinks[]; };  // a logit per query head
// With p.split: per (token, head, split), m, l and the v_dim weighted values.
layout(std430, binding = 6) writeonly buffer Parts { float parts[]; };
layout(push_constant) uniform Push {
  uint n_head, n_head_kv, head_dim, window, q_off, o_off, k_off, v_off;
  uint k_row_bytes, v_row_bytes, k_seq_stride, v_seq_stride, ring, k_type, v_type, pos_off;
  float scale;
  uint block_heads;  // GB: heads per workgroup, dividing the GQA group, GB x head_dim <= 2048
  uint tile_tokens;  // TQ: tokens per workgroup, one sequence; TQ x GB <= 8, TQ x GB x head_dim <= 2048
  uint n_tokens;
  uint has_sinks, sinks_off, v_dim;
  uint split, n_splits, part_off;
} p;

const uint MAX_DIMS = 8;  // v_dim <= 512
const uint MAX_G = 8;     // GB <= 8
shared float qv[2048];
shared float weights[MAX_G][64];
shared float partial[MAX_G][64];

uint slot(int pos) { return p.ring > 0u ? uint(pos) % p.ring : uint(pos); }

// Each row's running softmax over the current split (m, l, acc: this
// thread's output dimensions) and its total over the splits before.
float m[MAX_G], l[MAX_G], acc[MAX_G][MAX_DIMS];
float mt[MAX_G], lt[MAX_G], acct[MAX_G][MAX_DIMS];

// The split ends: its partial joins the total, and the next starts empty.
void fold_split(uint R) {
  for (uint r = 0; r < R; ++r) {
    float mm, ft, fp;
    merge_factors(mt[r], m[r], mm, ft, fp);
    lt[r] = merged(lt[r], ft, l[r], fp);
    for (uint i = 0; i < MAX_DIMS; ++i) {
      acct[r][i] = merged(acct[r][i], ft, acc[r][i], fp);
      acc[r][i] = 0.0;
    }
    mt[r] = mm;
    m[r] = -1.0 / 0.0;
    l[r] = 0.0;
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint GB = p.block_heads, hd = p.head_dim;
  const uint t0 = gl_WorkGroupID.y * p.tile_tokens, h0 = gl_WorkGroupID.x * GB;
  const uint R = min(p.tile_tokens, p.n_tokens - t0) * GB;  // rows r: token t0 + r / GB, head h0 + r % GB
  const int seq = rows[t0];
  int pos[MAX_G];
  int last = 0;
  for (uint r = 0; r < R; ++r) {
    pos[r] = rows[p.pos_off + t0 + r / GB];
    last = max(last, pos[r]);
  }
  const uint kh = h0 / (p.n_head / p.n_head_kv);
  for (uint r = 0; r < R; ++r) {
    const uint qb = p.q_off + ((t0 + r / GB) * p.n_head + h0 + r % GB) * hd;
    for (uint d = tid; d < hd; d += 64) qv[r * hd + d] = q[qb + d];
  }
  barrier();
  if (p.k_type == KV_Q8_0) {
    // As on the CPU (and in ggml), a query meets a Q8_0 key in Q8_0: each
    // block of 32 rounded with its f16 scale.
    for (uint block = tid * 32; block < R * hd; block += 64 * 32) {
      float amax = 0.0;
      for (uint i = 0; i < 32; ++i) amax = max(amax, abs(qv[block + i]));
      const float d = unpackHalf2x16(packHalf2x16(vec2(amax / 127.0, 0.0))).x;
      const float id = amax != 0.0 ? 127.0 / amax : 0.0;
      for (uint i = 0; i < 32; ++i) qv[block + i] = roundEven(qv[block + i] * id) * d;
    }
    barrier();
  }

  // One token: its window's first position; several: no window, 0.
  const int first = p.window > 0u ? max(0, pos[0] - int(p.window) + 1) : 0;
  float m_new[MAX_G], score[MAX_G];
  for (uint g = 0; g < MAX_G; ++g) {
    m[g] = -1.0 / 0.0;
    l[g] = 0.0;
    mt[g] = -1.0 / 0.0;
    lt[g] = 0.0;
    for (uint i = 0; i < MAX_DIMS; ++i) {
      acc[g][i] = 0.0;
      acct[g][i] = 0.0;
    }
  }
  // The positions this workgroup walks: all, or its split of them.
  int lo = first, hi = last;
  if (p.split != 0u) {
    lo = first + int(gl_WorkGroupID.z * SPLIT_POSITIONS);
    hi = min(last, lo + int(SPLIT_POSITIONS) - 1);
  }
  const uint k_base = p.k_off + uint(seq) * p.k_seq_stride, v_base = p.v_off + uint(seq) * p.v_seq_stride;
  for (int start = lo; start <= hi; start += 64) {
    if (start > lo && (start - first) % int(SPLIT_POSITIONS) == 0) fold_split(R);
    const int j = start + int(tid);
    for (uint g = 0; g < MAX_G; ++g) score[g] = -1.0 / 0.0;
    if (j <= hi) {
      const uint row = k_base + slot(j) * p.k_row_bytes;
      float s[MAX_G];
      for (uint g = 0; g < MAX_G; ++g) s[g] = 0.0;
      for (uint d = 0; d < hd; ++d) {
        const float kd = KV_VALUE(k, p.k_type, row, kh * hd + d);
        for (uint r = 0; r < R; ++r) s[r] = fma(qv[r * hd + d], kd, s[r]);
      }
      for (uint r = 0; r < R; ++r)
        if (j <= pos[r]) score[r] = s[r] * p.scale;
    }
    for (uint r = 0; r < R; ++r) partial[r][tid] = score[r];
    barrier();
    for (uint s = 32; s > 0; s >>= 1) {
      if (tid < s)
        for (uint r = 0; r < R; ++r) partial[r][tid] = max(partial[r][tid], partial[r][tid + s]);
      barrier();
    }
    for (uint r = 0; r < R; ++r) m_new[r] = max(m[r], partial[r][0]);
    barrier();
    for (uint r = 0; r < R; ++r) {
      const float wgt = j <= pos[r] ? exp(score[r] - m_new[r]) : 0.0;
      weights[r][tid] = wgt;
      partial[r][tid] = wgt;
    }
    barrier();
    for (uint s = 32; s > 0; s >>= 1) {
      if (tid < s)
        for (uint r = 0; r < R; ++r) partial[r][tid] += partial[r][tid + s];
      barrier();
    }
    // Rows whose position is before this chunk take nothing from it.
    float rescale[MAX_G];
    for (uint r = 0; r < R; ++r) {
      if (start > pos[r]) continue;
      rescale[r] = exp(m[r] - m_new[r]);
      l[r] = l[r] * rescale[r] + partial[r][0];
    }
    const int n = min(64, hi - start + 1);
    for (uint i = 0; i < MAX_DIMS; ++i) {
      const uint d = tid + i * 64;
      if (d >= p.v_dim) break;
      float a[MAX_G];
      for (uint r = 0; r < R; ++r) a[r] = start <= pos[r] ? acc[r][i] * rescale[r] : acc[r][i];
      for (int jj = 0; jj < n; ++jj) {
        const float vd = KV_VALUE(v, p.v_type, v_base + slot(start + jj) * p.v_row_bytes, kh * hd + d);
        for (uint r = 0; r < R; ++r)
          if (start + jj <= pos[r]) a[r] = fma(weights[r][jj], vd, a[r]);
      }
      for (uint r = 0; r < R; ++r) acc[r][i] = a[r];
    }
    for (uint r = 0; r < R; ++r)
      if (start <= pos[r]) m[r] = m_new[r];
    barrier();
  }
  fold_split(R);
  for (uint r = 0; r < R; ++r) {
    const uint row = (t0 + r / GB) * p.n_head + h0 + r % GB;
    if (p.split != 0u) {  // this split's partial, for attention_combine.comp
      const uint pb = p.part_off + (row * p.n_splits + gl_WorkGroupID.z) * (p.v_dim + 2u);
      if (tid == 0u) {
        parts[pb] = mt[r];
        parts[pb + 1u] = lt[r];
      }
      for (uint i = 0; i < MAX_DIMS; ++i) {
        const uint d = tid + i * 64;
        if (d < p.v_dim) parts[pb + 2u + d] = acct[r][i];
      }
      continue;
    }
    const uint ob = p.o_off + row * p.v_dim;
    const float sum = p.has_sinks != 0u ? lt[r] + exp(sinks[p.sinks_off + h0 + r % GB] - mt[r]) : lt[r];
    for (uint i = 0; i < MAX_DIMS; ++i) {
      const uint d = tid + i * 64;
      if (d < p.v_dim) o[ob + d] = acct[r][i] / sum;
    }
  }
}
