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
#include "dequant.glsl"

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
      load_chunk(base, c, p.cols);
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
