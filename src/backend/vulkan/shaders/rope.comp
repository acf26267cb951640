#version 450
// Rotates pair i of head h of row t by the angle whose cos and sin the host
// computed for (t, i) in double, as the CPU backend does: adjacent pairs, or
// halves (neox); the rotating dims start rope_offset into each head
// (latent attention's trail the head's unrotated part).
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Table { float table[]; };  // [n_tokens][rope_dim / 2][cos, sin]
layout(push_constant) uniform Push { uint n_heads, head_dim, rope_dim, neox, x_off, table_off, rope_offset; } p;

void main() {
  const uint half_ = p.rope_dim / 2;
  const uint i = gl_GlobalInvocationID.x;
  const uint h = gl_WorkGroupID.y;
  const uint t = gl_WorkGroupID.z;
  if (i >= half_) return;
  const uint at = p.table_off + (t * half_ + i) * 2;
  const float c = table[at], s = table[at + 1];
  const uint head = p.x_off + (t * p.n_heads + h) * p.head_dim + p.rope_offset;
  const uint a = head + (p.neox != 0u ? i : 2 * i), b = head + (p.neox != 0u ? i + half_ : 2 * i + 1);
  const float x0 = x[a], x1 = x[b];
  x[a] = x0 * c - x1 * s;
  x[b] = x0 * s + x1 * c;
}
