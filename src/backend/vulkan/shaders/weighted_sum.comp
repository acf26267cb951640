#version 450
// out[t][i] = sum over j < k of weights[t][j] * rows[t k + j][i], j in rank
// order: a token's experts combined, one thread a value.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Rows { float rows[]; };
layout(std430, binding = 1) readonly buffer Weights { float weights[]; };
layout(std430, binding = 2) writeonly buffer Out { float o[]; };
layout(push_constant) uniform Push {
  uint n_tokens, k, width, rows_off, weights_off, o_off, groups_x;
} p;

void main() {
  const uint i = (gl_WorkGroupID.y * p.groups_x + gl_WorkGroupID.x) * 256 + gl_LocalInvocationID.x;
  if (i >= p.n_tokens * p.width) return;
  const uint t = i / p.width, c = i % p.width;
  float acc = 0.0;
  for (uint j = 0; j < p.k; ++j)
    acc = fma(weights[p.weights_off + t * p.k + j], rows[p.rows_off + (t * p.k + j) * p.width + c], acc);
  o[p.o_off + i] = acc;
}
