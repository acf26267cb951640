#version 450
// The element-wise ops, one per OP: out[i] from a[i] (and b[i]).
#extension GL_GOOGLE_include_directive : enable
#include "elementwise_ops.h"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) buffer Out { float o[]; };
layout(push_constant) uniform Push { uint op, n, a_off, b_off, o_off, b_period, groups_x; float param; } p;

// tanh that cannot overflow on drivers that compute it from exp.
float safe_tanh(float u) { return tanh(clamp(u, -15.0, 15.0)); }

void main() {
  const uint i = (gl_WorkGroupID.y * p.groups_x + gl_WorkGroupID.x) * 256 + gl_LocalInvocationID.x;
  if (i >= p.n) return;
  const float x = a[p.a_off + i];
  float r;
  if (p.op == ELEMENTWISE_SWIGLU) {
    r = x / (1.0 + exp(-x)) * b[p.b_off + i];
  } else if (p.op == ELEMENTWISE_GEGLU) {
    const float g = 0.5 * x * (1.0 + safe_tanh(0.79788456080286535588 * x * (1.0 + 0.044715 * x * x)));
    r = g * b[p.b_off + i];
  } else if (p.op == ELEMENTWISE_SCALE) {
    r = x * p.param;
  } else if (p.op == ELEMENTWISE_SOFTCAP) {
    r = p.param * safe_tanh(x / p.param);
  } else if (p.op == ELEMENTWISE_ADD) {
    r = x + b[p.b_off + i];
  } else if (p.op == ELEMENTWISE_SIGMOID_MUL) {
    r = x / (1.0 + exp(-b[p.b_off + i]));
  } else if (p.op == ELEMENTWISE_SWIGLU_OAI) {  // gpt-oss: clamped, x sigmoid(1.702 x) (y + 1)
    const float g = min(x, 7.0), y = clamp(b[p.b_off + i], -7.0, 7.0);
    r = g / (1.0 + exp(-1.702 * g)) * (y + 1.0);
  } else {
    r = x + b[p.b_off + i % p.b_period];
  }
  o[p.o_off + i] = r;
}
