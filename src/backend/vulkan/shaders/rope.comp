#version 450
// Rotates pair i of head h of row t by positions[t] * freq_scale *
// base^(-2i/rope_dim) (divided by a frequency factor when the model has
// them): adjacent pairs, or halves (neox).
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Rows { int rows[]; };  // seq ids, then positions
layout(std430, binding = 2) readonly buffer Factors { float factors[]; };
layout(push_constant) uniform Push {
  uint n_heads, head_dim, rope_dim, neox, has_factors, x_off, pos_off, f_off, n_tokens;
  float freq_base, freq_scale;
} p;

void main() {
  const uint half_ = p.rope_dim / 2;
  const uint i = gl_GlobalInvocationID.x;
  const uint h = gl_WorkGroupID.y;
  const uint t = gl_WorkGroupID.z;
  if (i >= half_) return;
  float theta = float(rows[p.pos_off + t]) * p.freq_scale * pow(p.freq_base, -2.0 * float(i) / float(p.rope_dim));
  if (p.has_factors != 0u) theta /= factors[p.f_off + i];
  const float c = cos(theta), s = sin(theta);
  const uint head = p.x_off + (t * p.n_heads + h) * p.head_dim;
  const uint a = head + (p.neox != 0u ? i : 2 * i), b = head + (p.neox != 0u ? i + half_ : 2 * i + 1);
  const float x0 = x[a], x1 = x[b];
  x[a] = x0 * c - x1 * s;
  x[b] = x0 * s + x1 * c;
}
