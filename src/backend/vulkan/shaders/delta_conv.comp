#version 450
// A Gated DeltaNet's causal convolution (Backend::delta_net, first part):
// one thread per channel walks the step's rows in order, each on its
// sequence's window of the last kernel - 1 inputs (zeroed at position 0):
// out = silu(taps . [window, x]), oldest input first, as the CPU does; the
// window shifts by one input per row. qkv is convolved in place.
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Qkv { float qkv[]; };
layout(std430, binding = 1) readonly buffer Taps { float taps[]; };
layout(std430, binding = 2) buffer Conv { float conv[]; };
layout(std430, binding = 3) readonly buffer Rows { int rows[]; };
layout(push_constant) uniform Push {
  uint width, kernel, n_tokens, qkv_off, taps_off, conv_off, conv_seq_stride, pos_off;
} p;

void main() {
  const uint c = gl_GlobalInvocationID.x;
  if (c >= p.width) return;
  const uint w = p.taps_off + c * p.kernel;
  for (uint t = 0u; t < p.n_tokens; ++t) {
    const uint state = p.conv_off + uint(rows[t]) * p.conv_seq_stride;
    if (rows[p.pos_off + t] == 0)
      for (uint k = 0u; k + 1u < p.kernel; ++k) conv[state + k * p.width + c] = 0.0;
    const uint x = p.qkv_off + t * p.width + c;
    float acc = 0.0;
    for (uint k = 0u; k + 1u < p.kernel; ++k) acc += conv[state + k * p.width + c] * taps[w + k];
    acc += qkv[x] * taps[w + p.kernel - 1u];
    for (uint k = 0u; k + 2u < p.kernel; ++k) conv[state + k * p.width + c] = conv[state + (k + 1u) * p.width + c];
    conv[state + (p.kernel - 2u) * p.width + c] = qkv[x];
    qkv[x] = acc / (1.0 + exp(-acc));
  }
}
