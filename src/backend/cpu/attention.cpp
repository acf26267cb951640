#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>

namespace shoal {
namespace {
constexpr int kBlock = 64;  // cache positions per softmax block
constexpr int kMaxHeadDim = 512;
}  // namespace

void attend_one_head(const float* q, const KvLayerView& kv, int seq, int pos, int h, const AttentionShape& shape,
                     float* out) {
  const int d = shape.head_dim;
  const int kv_head = h / (shape.n_head / shape.n_head_kv);  // grouped-query: heads share a kv head
  const float* kbase = kv.k + seq * kv.seq_stride + kv_head * d;
  const float* vbase = kv.v + seq * kv.seq_stride + kv_head * d;
  float acc[kMaxHeadDim] = {};
  float scores[kBlock];
  float running_max = -INFINITY, running_sum = 0.0f;
  const int first = shape.window > 0 ? std::max(0, pos - shape.window + 1) : 0;
  for (int start = first; start <= pos; start += kBlock) {
    const int n = std::min(kBlock, pos + 1 - start);
    float block_max = -INFINITY;
    for (int j = 0; j < n; ++j) {
      const float* k = kbase + kv.slot(start + j) * kv.width;
      float s = 0.0f;
      for (int i = 0; i < d; ++i) s += q[i] * k[i];
      scores[j] = s * shape.scale;
      block_max = std::max(block_max, scores[j]);
    }
    const float new_max = std::max(running_max, block_max);
    const float rescale = std::exp(running_max - new_max);  // 0 on the first block
    running_sum *= rescale;
    for (int i = 0; i < d; ++i) acc[i] *= rescale;
    for (int j = 0; j < n; ++j) {
      const float p = std::exp(scores[j] - new_max);
      running_sum += p;
      const float* v = vbase + kv.slot(start + j) * kv.width;
      for (int i = 0; i < d; ++i) acc[i] += p * v[i];
    }
    running_max = new_max;
  }
  const float inv = 1.0f / running_sum;
  for (int i = 0; i < d; ++i) out[i] = acc[i] * inv;
}

}  // namespace shoal
