#version 450
// y[t] = x[t] / rms(x[t]) * weight: one workgroup per row, a fixed tree for
// the sum of squares. y may be x. w_off ~0u: no weight (times 1: gemma4's V).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float weight[]; };
layout(std430, binding = 2) buffer Y { float y[]; };
layout(push_constant) uniform Push { uint n, x_off, w_off, y_off; float eps; uint rows; } p;
shared float partial[64];

void main() {
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u;
  if (row >= p.rows) return;  // the whole workgroup leaves together
  const uint tid = gl_LocalInvocationID.x;
  const uint xb = p.x_off + row * p.n, yb = p.y_off + row * p.n;
  float sum = 0.0;
  for (uint i = tid; i < p.n; i += 64) sum = fma(x[xb + i], x[xb + i], sum);
  partial[tid] = sum;
  barrier();
  for (uint s = 32; s > 0; s >>= 1) {
    if (tid < s) partial[tid] += partial[tid + s];
    barrier();
  }
  const float inv = 1.0 / sqrt(partial[0] / float(p.n) + p.eps);
  // Each thread rewrites only the values it summed: in place is safe.
  if (p.w_off == 0xffffffffu)
    for (uint i = tid; i < p.n; i += 64) y[yb + i] = x[xb + i] * inv;
  else
    for (uint i = tid; i < p.n; i += 64) y[yb + i] = x[xb + i] * inv * weight[p.w_off + i];
}
