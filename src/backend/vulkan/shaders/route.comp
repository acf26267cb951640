#version 450
// A mixture's plain router on the device: for each token, the k experts
// with the highest logits, best first, ties to the lower id (as the host's
// route()), and their weights: a softmax over the chosen logits, times
// `scale`. One thread a token; the j-th choice is the best expert ordered
// after the (j-1)-th, so no list of the taken ones is kept.
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Logits { float logits[]; };
layout(std430, binding = 1) writeonly buffer Experts { int experts[]; };
layout(std430, binding = 2) writeonly buffer Weights { float weights[]; };
layout(push_constant) uniform Push {
  uint n_tokens, n_expert, k, logits_off, experts_off, weights_off;
  float scale;
} p;

void main() {
  const uint t = gl_GlobalInvocationID.x;
  if (t >= p.n_tokens) return;
  const uint row = p.logits_off + t * p.n_expert, out_at = p.experts_off + t * p.k;
  // The chosen logits (k <= 64, the host checks); n: how many were chosen
  // (fewer than k only where the rest are NaN: their slots get id -1, weight 0).
  float chosen[64];
  uint n = 0;
  float prev = 0.0;
  int prev_id = -1;
  for (; n < p.k; ++n) {
    float best = 0.0;
    int best_id = -1;
    for (uint e = 0; e < p.n_expert; ++e) {
      const float l = logits[row + e];
      // After the previous choice in the order (logit down, id up)...
      if (prev_id >= 0 && !(l < prev || (l == prev && int(e) > prev_id))) continue;
      // ...and before every other candidate (the first of equals wins).
      if (best_id < 0 || l > best) {
        best = l;
        best_id = int(e);
      }
    }
    if (best_id < 0) break;
    experts[out_at + n] = best_id;
    chosen[n] = best;
    prev = best;
    prev_id = best_id;
  }
  float sum = 0.0;
  for (uint j = 0; j < n; ++j) sum += exp(chosen[j] - chosen[0]);
  for (uint j = 0; j < p.k; ++j) {
    if (j >= n) experts[out_at + j] = -1;
    weights[p.weights_off + t * p.k + j] = j < n ? exp(chosen[j] - chosen[0]) / sum * p.scale : 0.0;
  }
}
