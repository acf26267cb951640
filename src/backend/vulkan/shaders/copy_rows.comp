#version 450
// n_rows rows of width floats from src to dst, rows src_stride and
// dst_stride floats apart (a head's slice of every token, a DeltaNet's beta
// and alpha out of their joint projection): one dispatch, a thread a value.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Src { float src[]; };
layout(std430, binding = 1) writeonly buffer Dst { float dst[]; };
layout(push_constant) uniform Push { uint width, n_rows, src_off, src_stride, dst_off, dst_stride, groups_x; } p;

void main() {
  const uint i = (gl_WorkGroupID.y * p.groups_x + gl_WorkGroupID.x) * 256 + gl_LocalInvocationID.x;
  if (i >= p.width * p.n_rows) return;
  const uint r = i / p.width, c = i % p.width;
  dst[p.dst_off + r * p.dst_stride + c] = src[p.src_off + r * p.src_stride + c];
}
