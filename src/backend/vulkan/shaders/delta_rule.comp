#version 450
// A Gated DeltaNet's recurrence (Backend::delta_net, last part): one
// workgroup per value head walks the step's rows in order on its sequence's
// state S (head_dim x head_dim, stored transposed as the CPU keeps it:
// element j * head_dim + i is row i, column j), zeroed at position 0.
// Per row: S *= g; d = (v - S k) * beta; S += d k^T; out = S q / sqrt(hd),
// g = exp(softplus(alpha + dt) * a), beta = sigmoid(beta). Thread i owns
// row i of S (column i of the stored matrix), so every sum is one thread's
// loop over j in the CPU's order: no reduction across threads.
layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer Qkv { float qkv[]; };
layout(std430, binding = 1) readonly buffer Alpha { float alpha[]; };
layout(std430, binding = 2) readonly buffer Beta { float beta[]; };
layout(std430, binding = 3) readonly buffer Dt { float dt[]; };
layout(std430, binding = 4) readonly buffer A { float a[]; };
layout(std430, binding = 5) buffer State { float state[]; };
layout(std430, binding = 6) readonly buffer Rows { int rows[]; };
layout(std430, binding = 7) buffer Out { float o[]; };
layout(push_constant) uniform Push {
  uint head_dim, n_k, n_v, keys_interleaved, n_tokens, width, value_width, qkv_off, alpha_off, beta_off, dt_off, a_off,
      ssm_off, ssm_seq_stride, out_off, pos_off;
  float scale;
} p;
shared float qs[512];
shared float ks[512];

float softplus(float x) { return x > 20.0 ? x : log(1.0 + exp(x)); }

void main() {
  const uint h = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x, hd = p.head_dim;
  const uint kh = p.keys_interleaved != 0u ? h / (p.n_v / p.n_k) : h % p.n_k;
  const uint key_width = p.n_k * hd;
  for (uint t = 0u; t < p.n_tokens; ++t) {
    const uint base = p.ssm_off + uint(rows[t]) * p.ssm_seq_stride + h * hd * hd;
    const uint row = p.qkv_off + t * p.width;
    if (rows[p.pos_off + t] == 0)
      for (uint i = tid; i < hd; i += 128u)
        for (uint j = 0u; j < hd; ++j) state[base + j * hd + i] = 0.0;
    for (uint j = tid; j < hd; j += 128u) {
      qs[j] = qkv[row + kh * hd + j];
      ks[j] = qkv[row + key_width + kh * hd + j];
    }
    barrier();
    const float g = exp(softplus(alpha[p.alpha_off + t * p.n_v + h] + dt[p.dt_off + h]) * a[p.a_off + h]);
    const float b = 1.0 / (1.0 + exp(-beta[p.beta_off + t * p.n_v + h]));
    for (uint i = tid; i < hd; i += 128u) {
      float sk = 0.0;
      for (uint j = 0u; j < hd; ++j) {
        const float s = state[base + j * hd + i] * g;
        state[base + j * hd + i] = s;
        sk += s * ks[j];
      }
      const float d = (qkv[row + 2u * key_width + h * hd + i] - sk) * b;
      float acc = 0.0;
      for (uint j = 0u; j < hd; ++j) {
        const float s = state[base + j * hd + i] + ks[j] * d;
        state[base + j * hd + i] = s;
        acc += s * qs[j];
      }
      o[p.out_off + t * p.value_width + h * hd + i] = acc * p.scale;
    }
    barrier();  // the next row's q and k overwrite these
  }
}
