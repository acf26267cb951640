#version 450
// y[t][r] = W[r] · x[t] straight on the GGUF blocks (one TYPE_* per build).
// A thread owns ROWS rows and up to TILE tokens: it walks the rows' 32-value
// chunks in order, dequantizes each once, reads each activation once for all
// its rows, and adds into one fused chain per (row, token). No thread waits
// for another. A token's result is the same whatever else is in the batch:
// its chain is the row's chunks in order. Built with MATVEC it is the
// one-token kernel (decode): a thread owns more rows, so each activation
// load serves more weights, and keeps no dequantized chunk across tokens;
// its chains are the same, so are its bits. Built with MATVEC and ROUTED it
// runs a mixture's experts: token t is a route slot, which multiplies its
// activation row (t / x_share) by the rows of its own expert (experts[t],
// device memory: the router's choice is never read back), the same chain
// as that expert's matmul of the row alone. A dispatch covers one part of
// the stacked experts; a slot routed to another part leaves its row.
#extension GL_GOOGLE_include_directive : enable
#extension GL_EXT_control_flow_attributes : enable
#include "common.glsl"

layout(local_size_x = 32) in;
layout(std430, binding = 0) readonly buffer Weights { uint w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
#ifdef ROUTED
layout(std430, binding = 3) readonly buffer Experts { int experts[]; };
#endif
layout(push_constant) uniform Push {
  uint rows, cols, n_tokens, w_off, row_stride, x_off, y_off;
  uint y_stride;  // values between a token's outputs: the whole matrix's rows when this is a part of it
  // ROUTED: rows is one expert's; this part holds experts [first_expert, + part_experts).
  uint experts_off, first_expert, part_experts, x_share;
} p;

#ifdef MATVEC
const uint TILE = 1;
const uint ROWS = 8;
#else
const uint TILE = 8;   // tokens per workgroup
const uint ROWS = 4;   // rows per thread: an activation read serves them all
#endif
const uint GROUP_ROWS = 32 * ROWS;
#include "dequant.glsl"

void main() {
  // Row groups past the device's x limit (a vocabulary head) continue in z.
  const uint row_group = gl_WorkGroupID.z * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint first = row_group * GROUP_ROWS + gl_LocalInvocationID.x;  // rows first + 32 j
  const uint t0 = gl_WorkGroupID.y * TILE;
  const uint nt = min(TILE, p.n_tokens - t0);
  if (first >= p.rows) return;
  const uint n_rows = min(ROWS, (p.rows - first + 31) / 32);
#ifdef MATVEC
  uint w_base = p.w_off, x_row = t0;
#ifdef ROUTED
  const int e = experts[p.experts_off + t0] - int(p.first_expert);
  if (e < 0 || e >= int(p.part_experts)) return;
  w_base += uint(e) * p.rows * p.row_stride;
  x_row = t0 / p.x_share;
#endif
  float acc[ROWS];
  float xv[32];
  for (uint j = 0; j < ROWS; ++j) acc[j] = 0.0;
  const uint chunks = (p.cols + 31) / 32;
  for (uint c = 0; c < chunks; ++c) {
    const uint last = p.cols - 1 - c * 32;
    const uint xb = p.x_off + x_row * p.cols + c * 32;
    for (uint k = 0; k < 32; ++k) xv[k] = x[xb + min(k, last)];
    for (uint j = 0; j < ROWS; ++j) {
      if (j >= n_rows) break;
      load_chunk(w_base + (first + 32 * j) * p.row_stride, c, p.cols);
      float a = acc[j];
      for (uint k = 0; k < 32; ++k) a = fma(v[k], xv[k], a);
      acc[j] = a;
    }
  }
  for (uint j = 0; j < n_rows; ++j) y[p.y_off + t0 * p.y_stride + first + 32 * j] = acc[j];
}
#else
  float acc[ROWS][TILE];
  float wv[ROWS][32];
  float xv[32];
  for (uint j = 0; j < ROWS; ++j)
    for (uint t = 0; t < TILE; ++t) acc[j][t] = 0.0;
  const uint chunks = (p.cols + 31) / 32;
  for (uint c = 0; c < chunks; ++c) {
    for (uint j = 0; j < n_rows; ++j) {
      load_chunk(p.w_off + (first + 32 * j) * p.row_stride, c, p.cols);
      wv[j] = v;
    }
    // A float row's last chunk may be short: its missing weights are 0
    // and its activations are read at the row's last value instead.
    const uint last = p.cols - 1 - c * 32;
    for (uint t = 0; t < nt; ++t) {
      const uint xb = p.x_off + (t0 + t) * p.cols + c * 32;
      for (uint k = 0; k < 32; ++k) xv[k] = x[xb + min(k, last)];
      for (uint j = 0; j < n_rows; ++j) {
        float a = acc[j][t];
        for (uint k = 0; k < 32; ++k) a = fma(wv[j][k], xv[k], a);
        acc[j][t] = a;
      }
    }
  }
  for (uint j = 0; j < n_rows; ++j)
    for (uint t = 0; t < nt; ++t) y[p.y_off + (t0 + t) * p.y_stride + first + 32 * j] = acc[j][t];
}
#endif
