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
// the stacked experts; a slot routed to another part leaves its row. Built
// with TILED it is the prompt kernel for a GPU: a workgroup of 64 rows and
// 32 tokens whose activations it reads once into shared memory, each weight
// chunk read once for the 32 (the register build above reads it once per 8
// and is the better fit for a CPU device); the same chains again. Every
// chain's sums are `precise`: fma() is then one fused operation in each
// build, never a product and a sum a driver might round apart.
#extension GL_GOOGLE_include_directive : enable
#extension GL_EXT_control_flow_attributes : enable
#include "common.glsl"

#ifdef TILED
const uint TILE_ROWS = 64;    // rows per workgroup, one a thread
const uint TILE_TOKENS = 32;  // tokens per workgroup, their activations shared
layout(local_size_x = TILE_ROWS) in;
shared float xs[TILE_TOKENS][32];  // the tile's activations, chunk by chunk
shared float ws[TILE_ROWS][33];    // each thread's weight chunk (read by index, not unrolled)
#else
layout(local_size_x = 32) in;
#endif
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
#ifdef TILED
  // Workgroup: TILE_ROWS rows (one a thread) by TILE_TOKENS tokens. Each
  // chunk of the tokens' activations goes through shared memory once for
  // every row of the group, and each weight chunk is read once for all the
  // tile's tokens: a prompt of 512 streams the weights 16 times, not 64.
  // The chain per (row, token) is the other builds' (chunks in order, each
  // value fused in order), so are the bits.
  const uint row = row_group * TILE_ROWS + gl_LocalInvocationID.x;
  const uint tt0 = gl_WorkGroupID.y * TILE_TOKENS;
  const uint tn = min(TILE_TOKENS, p.n_tokens - tt0);
  const bool has_row = row < p.rows;
  precise float acc[TILE_TOKENS];
  [[unroll]] for (uint t = 0; t < TILE_TOKENS; ++t) acc[t] = 0.0;
  const uint chunks = (p.cols + 31) / 32;
  for (uint c = 0; c < chunks; ++c) {
    const uint last = p.cols - 1 - c * 32;
    barrier();  // every thread is done with the last chunk's tile
    for (uint i = gl_LocalInvocationID.x; i < TILE_TOKENS * 32; i += TILE_ROWS) {
      const uint t = i / 32, k = i % 32;
      xs[t][k] = t < tn ? x[p.x_off + (tt0 + t) * p.cols + c * 32 + min(k, last)] : 0.0;
    }
    if (has_row) {  // only this thread reads its row
      load_chunk(p.w_off + row * p.row_stride, c, p.cols);
      [[unroll]] for (uint k = 0; k < 32; ++k) ws[gl_LocalInvocationID.x][k] = v[k];
    }
    barrier();
    if (has_row) {
      // Every token of the tile, those past the batch on zeros (never
      // written): a constant bound keeps acc in registers; the values in
      // order, so each (row, token) chain is the other builds'.
      for (uint k = 0; k < 32; ++k) {
        const float wk = ws[gl_LocalInvocationID.x][k];
        [[unroll]] for (uint t = 0; t < TILE_TOKENS; ++t) acc[t] = fma(wk, xs[t][k], acc[t]);
      }
    }
  }
  if (has_row)
    [[unroll]] for (uint t = 0; t < TILE_TOKENS; ++t)
      if (t < tn) y[p.y_off + (tt0 + t) * p.y_stride + row] = acc[t];
}
#else
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
      precise float a = acc[j];
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
        precise float a = acc[j][t];
        for (uint k = 0; k < 32; ++k) a = fma(wv[j][k], xv[k], a);
        acc[j][t] = a;
      }
    }
  }
  for (uint j = 0; j < n_rows; ++j)
    for (uint t = 0; t < nt; ++t) y[p.y_off + (t0 + t) * p.y_stride + first + 32 * j] = acc[j][t];
}
#endif
#endif  // TILED
