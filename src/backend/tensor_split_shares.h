#pragma once
// Who holds which rows in a tensor split (tensor_split_backend.h): each
// member's share of a matrix's rows, of a mixture's experts and of
// attention's heads, from the members' share weights. The one place this is
// computed: the backend that runs a share, the weights bound and loaded for
// it (model/weights.h) and the cost model that predicts it all use these.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "backend/backend.h"

namespace shoal {

// Shares are whole units of this many rows: a multiple of the CPU matmul's
// row unit (24: whole groups of eight, whole tiles of three float rows), so
// a share's rows fall in the same tiles as in the whole matrix. (Attention's
// head shares are whole heads, a multiple of 8 rows: those rest on the
// kernels computing a row alike in any tile, which the tensor split tests
// check.)
inline constexpr int64_t kRowShareUnit = 24;

struct RowShare {
  int64_t begin = 0, end = 0;
  int64_t rows() const { return end - begin; }
};
// Every member's weight in its group, by rank: the members' shares are in
// proportion to them (a fast member takes more rows), each member at least
// one unit; equal weights split evenly. Every member and the primary use the
// same weights (LOAD_STAGE's group), so they agree on who holds which rows.
using ShareWeights = std::vector<int>;
inline constexpr int kMaxShareWeight = 1000000;
inline ShareWeights even_shares(int size) { return ShareWeights(static_cast<size_t>(size), 1); }
// Member `rank`'s rows of a matrix of `rows` rows split by `weights`.
RowShare row_share(int64_t rows, int rank, const ShareWeights& weights);
// Whether a matrix of `rows` rows is split at all: one too small for a
// unit each is computed whole by every member (a router, a gate per head).
bool row_split(int64_t rows, int size);
// Whether a weight handed to prepare_weights is divided among `size`
// members: a matmul's weight read whole (not a stacked slice, not read row
// by row) with rows enough to split.
bool row_split_weight(const WeightToPrepare& w, int size);

// A mixture's experts are divided by expert: member `rank` holds experts
// [begin, end) of each layer and runs only those; the members then trade
// the rows of expert outputs, and every member sums each token's experts
// in rank order as a local run does. With fewer experts than members,
// every member holds them all.
bool expert_split(int n_expert, int size);
RowShare expert_share(int n_expert, int rank, const ShareWeights& weights);
bool expert_split_weight(const WeightToPrepare& w, int size);
// The rows of a stacked expert tensor that member `rank` holds.
RowShare expert_rows(const WeightToPrepare& w, int rank, const ShareWeights& weights);
// Attention is divided by heads when the group has a query head for each
// member: member `rank` computes query heads [q_begin, q_end) and caches
// the KV heads they read, [kv_begin, kv_end). With a KV head for each
// member the KV heads are shared out (each with its query heads), so no KV
// head is held twice; with fewer (SmolLM2's 3, Qwen2.5-0.5B's 2) the query
// heads are, and a KV head two members' queries read is computed and
// cached by both. Each head is the local kernel's over the same rows, so
// the bits stay the local run's; the members all-gather attention's output
// (one exchange where Q, K and V took one).
struct HeadShare {
  int q_begin = 0, q_end = 0, kv_begin = 0, kv_end = 0;
  int q_heads() const { return q_end - q_begin; }
  int kv_heads() const { return kv_end - kv_begin; }
};
bool head_split(const AttentionHeads& heads, int size);
// Whether a weight handed to prepare_weights is a Q, K or V projection
// divided by heads.
bool head_split_weight(const WeightToPrepare& w, int size);
HeadShare head_share(const AttentionHeads& heads, int rank, const ShareWeights& weights);
// The device memory a member dividing heads copies them through in a step
// of n_tokens (its KV heads stored, its queries and outputs attended).
size_t head_scratch_bytes(const AttentionHeads& heads, const HeadShare& share, int n_tokens);
// The rows of a Q, K or V projection member `rank` keeps (head_rows set).
RowShare head_rows(const WeightToPrepare& w, int rank, const ShareWeights& weights);

// What member `rank` keeps of a weight handed to prepare_weights: its rows
// (row_share), its heads' rows (head_rows) or its experts' rows (expert_rows); nullopt when it keeps the
// whole weight. The one rule the backend and the loading (tensor_shares) use.
std::optional<RowShare> kept_rows(const WeightToPrepare& w, int rank, const ShareWeights& weights);

}  // namespace shoal
