#version 450
// Writes row t of src ([n_tokens][width] f32) into the cache row of
// (seq_ids[t], positions[t]) in F32, F16 or Q8_0. One thread per 32-bit word
// of the destination row (rows are whole words, a q8_0 row of an odd number
// of blocks padded with zeros), so no two threads share a word; a Q8_0 word
// recomputes the scale of each block it touches (max-abs / 127, the
// quantized values rounded to nearest even, as the CPU does).
#extension GL_GOOGLE_include_directive : enable
#include "common.glsl"
#include "kv.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Src { float src[]; };
layout(std430, binding = 1) buffer Dst { uint dst[]; };
layout(std430, binding = 2) readonly buffer Rows { int rows[]; };
layout(push_constant) uniform Push {
  uint width, type, dst_off, row_bytes, seq_stride, ring, src_off, pos_off;
} p;

uint q8_byte(uint sb, uint b) {
  const uint block = b / 34u, within = b % 34u;
  if (block >= p.width / 32u) return 0u;  // the padding of a row of an odd number of blocks
  const uint first = sb + block * 32u;
  float amax = 0.0;
  for (uint i = 0; i < 32u; ++i) amax = max(amax, abs(src[first + i]));
  const float d = amax / 127.0;
  if (within < 2u) {
    const uint half_bits = packHalf2x16(vec2(d, 0.0)) & 0xFFFFu;
    return (half_bits >> (8u * within)) & 0xFFu;
  }
  const float id = amax != 0.0 ? 127.0 / amax : 0.0;
  return uint(int(roundEven(src[first + within - 2u] * id))) & 0xFFu;
}

void main() {
  const uint word = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
  if (word * 4u >= p.row_bytes) return;
  const int seq = rows[t], pos = rows[p.pos_off + t];
  const uint slot = p.ring > 0u ? uint(pos) % p.ring : uint(pos);
  const uint row = p.dst_off + uint(seq) * p.seq_stride + slot * p.row_bytes;
  const uint sb = p.src_off + t * p.width;
  uint out_word;
  if (p.type == KV_F32) {
    out_word = floatBitsToUint(src[sb + word]);
  } else if (p.type == KV_F16) {
    out_word = packHalf2x16(vec2(src[sb + 2u * word], src[sb + 2u * word + 1u]));
  } else {
    out_word = 0u;
    for (uint i = 0; i < 4u; ++i) out_word |= q8_byte(sb, word * 4u + i) << (8u * i);
  }
  dst[(row >> 2) + word] = out_word;
}
