#version 450
// out[t] = row ids[t] of W, dequantized (the embedding lookup; one TYPE_*
// per build). A thread writes one 32-value chunk of one row, with the host
// dequantizer's arithmetic in its order, so the rows are the CPU's bits.
#extension GL_GOOGLE_include_directive : enable
#extension GL_EXT_control_flow_attributes : enable
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Weights { uint w[]; };
layout(std430, binding = 1) readonly buffer Ids { int ids[]; };
layout(std430, binding = 2) writeonly buffer Out { float o[]; };
layout(push_constant) uniform Push {
  uint cols, w_off, row_stride, o_off;
  uint first_row, part_rows;  // the rows this buffer holds (a matrix larger than one buffer is in parts)
} p;

#define EXACT_DEQUANT
#include "dequant.glsl"

void main() {
  const uint c = gl_WorkGroupID.x * 64 + gl_LocalInvocationID.x;
  const uint t = gl_WorkGroupID.y;
  const int id = ids[t] - int(p.first_row);
  if (c * 32 >= p.cols || id < 0 || id >= int(p.part_rows)) return;
  load_chunk(p.w_off + uint(id) * p.row_stride, c, p.cols);
  const uint at = p.o_off + t * p.cols + c * 32;
  const uint n = min(32u, p.cols - c * 32);
  for (uint k = 0; k < n; ++k) o[at + k] = v[k];
}
