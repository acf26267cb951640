#include "backend/tensor_split_shares.h"

#include <algorithm>

namespace shoal {

namespace {
// Where member r's units start when `units` (at least one per member) are
// shared by `weights`: one unit each, and the rest in proportion. With
// equal weights this is ⌊units·r/k⌋.
int64_t share_edge(int64_t units, int r, const ShareWeights& weights) {
  const int k = static_cast<int>(weights.size());
  if (r >= k) return units;
  int64_t before = 0, total = 0;
  for (int i = 0; i < k; ++i) {
    total += weights[static_cast<size_t>(i)];
    if (i < r) before += weights[static_cast<size_t>(i)];
  }
  return r + (units - k) * before / total;
}
}  // namespace

RowShare row_share(int64_t rows, int rank, const ShareWeights& weights) {
  const int64_t units = (rows + kRowShareUnit - 1) / kRowShareUnit;
  auto edge = [&](int r) { return std::min(rows, share_edge(units, r, weights) * kRowShareUnit); };
  return {edge(rank), rank + 1 == static_cast<int>(weights.size()) ? rows : edge(rank + 1)};
}

bool row_split(int64_t rows, int size) { return size > 1 && rows >= kRowShareUnit * size; }

bool row_split_weight(const WeightToPrepare& w, int size) {
  return !w.rows_only && w.slice_rows == 0 && row_split(w.matrix->rows, size);
}

bool expert_split(int n_expert, int size) { return size > 1 && n_expert >= size; }

RowShare expert_share(int n_expert, int rank, const ShareWeights& weights) {
  return {share_edge(n_expert, rank, weights), share_edge(n_expert, rank + 1, weights)};
}

bool expert_split_weight(const WeightToPrepare& w, int size) {
  return w.experts && !w.rows_only && w.slice_rows > 0 &&
         expert_split(static_cast<int>(w.matrix->rows / w.slice_rows), size);
}

RowShare expert_rows(const WeightToPrepare& w, int rank, const ShareWeights& weights) {
  const RowShare e = expert_share(static_cast<int>(w.matrix->rows / w.slice_rows), rank, weights);
  return {e.begin * w.slice_rows, e.end * w.slice_rows};
}

bool head_split(const AttentionHeads& h, int size) {
  // Shares in whole groups of eight rows (a head's rows are a multiple of eight).
  return size > 1 && h.any() && h.n_head >= size && h.head_dim % 8 == 0 && h.q_head_rows % 8 == 0;
}

HeadShare head_share(const AttentionHeads& h, int rank, const ShareWeights& weights) {
  const int group = h.n_head / h.n_head_kv, size = static_cast<int>(weights.size());
  auto edge = [&](int units, int r) { return static_cast<int>(share_edge(units, r, weights)); };
  HeadShare s;
  if (h.n_head_kv >= size) {  // whole KV heads, each with its query heads
    s.kv_begin = edge(h.n_head_kv, rank);
    s.kv_end = edge(h.n_head_kv, rank + 1);
    s.q_begin = s.kv_begin * group;
    s.q_end = s.kv_end * group;
  } else {  // query heads, and every KV head they read
    s.q_begin = edge(h.n_head, rank);
    s.q_end = edge(h.n_head, rank + 1);
    s.kv_begin = s.q_begin / group;
    s.kv_end = (s.q_end - 1) / group + 1;
  }
  return s;
}

size_t head_scratch_bytes(const AttentionHeads& h, const HeadShare& share, int n_tokens) {
  const int64_t per_token = 2 * int64_t{h.head_dim} * (share.kv_heads() + share.q_heads());
  return static_cast<size_t>(n_tokens * per_token) * sizeof(float);
}

bool head_split_weight(const WeightToPrepare& w, int size) {
  if (w.head_rows == HeadRows::None || !head_split(w.heads, size)) return false;
  const AttentionHeads& h = w.heads;
  return w.matrix->rows == (w.head_rows == HeadRows::Query ? int64_t{h.n_head} * h.q_head_rows
                                                           : int64_t{h.n_head_kv} * h.head_dim);
}

RowShare head_rows(const WeightToPrepare& w, int rank, const ShareWeights& weights) {
  const HeadShare s = head_share(w.heads, rank, weights);
  if (w.head_rows == HeadRows::Query)
    return {int64_t{s.q_begin} * w.heads.q_head_rows, int64_t{s.q_end} * w.heads.q_head_rows};
  return {int64_t{s.kv_begin} * w.heads.head_dim, int64_t{s.kv_end} * w.heads.head_dim};
}

std::optional<RowShare> kept_rows(const WeightToPrepare& w, int rank, const ShareWeights& weights) {
  const int size = static_cast<int>(weights.size());
  if (expert_split_weight(w, size)) return expert_rows(w, rank, weights);
  if (head_split_weight(w, size)) return head_rows(w, rank, weights);
  if (row_split_weight(w, size)) return row_share(w.matrix->rows, rank, weights);
  return std::nullopt;
}

}  // namespace shoal
