#version 450
// A Gated DeltaNet's L2 norms (Backend::delta_net, second part): each key
// head's q and k of every row scaled to x / sqrt(sum x^2 + eps), one
// workgroup per (row, head, q or k) with a fixed tree for the sum.
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Qkv { float qkv[]; };
layout(push_constant) uniform Push { uint width, head_dim, key_width, qkv_off; float eps; } p;
shared float partial[64];

void main() {
  const uint head = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  // Heads [0, n_k) are q's, [n_k, 2 n_k) k's: k starts key_width after q.
  const uint base = p.qkv_off + t * p.width + head * p.head_dim;
  float sum = 0.0;
  for (uint i = tid; i < p.head_dim; i += 64u) sum = fma(qkv[base + i], qkv[base + i], sum);
  partial[tid] = sum;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (tid < s) partial[tid] += partial[tid + s];
    barrier();
  }
  const float inv = 1.0 / sqrt(partial[0] + p.eps);
  for (uint i = tid; i < p.head_dim; i += 64u) qkv[base + i] *= inv;
}
