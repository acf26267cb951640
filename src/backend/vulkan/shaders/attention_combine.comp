#version 450
// Flash-decoding's second half: a row's (a token and a head) split partials
// from attention.comp, merged in split order as that shader merges them
// when one workgroup walks every split (attention_merge.glsl), then the
// weighted values divided by the softmax's sum (with the head's sink logit,
// gpt-oss). One workgroup a row, a thread for each 64th output dimension.
#extension GL_GOOGLE_include_directive : enable
#include "common.glsl"
#include "attention_merge.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Parts { float parts[]; };
layout(std430, binding = 1) writeonly buffer Out { float o[]; };
layout(std430, binding = 2) readonly buffer Sinks { float sinks[]; };
layout(push_constant) uniform Push {
  uint n_head, v_dim, n_splits, part_off, o_off, has_sinks, sinks_off;
} p;

const uint MAX_DIMS = 8;  // v_dim <= 512

void main() {
  const uint tid = gl_LocalInvocationID.x, row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  float mt = -1.0 / 0.0, lt = 0.0;
  float acct[MAX_DIMS];
  for (uint i = 0; i < MAX_DIMS; ++i) acct[i] = 0.0;
  for (uint s = 0; s < p.n_splits; ++s) {
    const uint pb = p.part_off + (row * p.n_splits + s) * (p.v_dim + 2u);
    float mm, ft, fp;
    merge_factors(mt, parts[pb], mm, ft, fp);
    lt = merged(lt, ft, parts[pb + 1u], fp);
    for (uint i = 0; i < MAX_DIMS; ++i) {
      const uint d = tid + i * 64;
      acct[i] = merged(acct[i], ft, d < p.v_dim ? parts[pb + 2u + d] : 0.0, fp);
    }
    mt = mm;
  }
  const float sum = p.has_sinks != 0u ? lt + exp(sinks[p.sinks_off + row % p.n_head] - mt) : lt;
  for (uint i = 0; i < MAX_DIMS; ++i) {
    const uint d = tid + i * 64;
    if (d < p.v_dim) o[p.o_off + row * p.v_dim + d] = acct[i] / sum;
  }
}
