#include "backend/tensor_split_backend.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace shoal {

TensorSplitBackend::TensorSplitBackend(std::unique_ptr<Backend> inner, std::shared_ptr<RowExchange> exchange,
                                       int rank, ShareWeights weights)
    : ForwardingBackend(std::move(inner)),
      exchange_(std::move(exchange)),
      rank_(rank),
      size_(static_cast<int>(weights.size())),
      weights_(std::move(weights)) {
  if (size_ < 1 || rank_ < 0 || rank_ >= size_) fail("internal: member {} of a group of {}", rank_, size_);
  if (std::any_of(weights_.begin(), weights_.end(), [](int w) { return w < 1; }))
    fail("internal: a tensor group member's share weight below 1");
  theirs_.resize(size_);
  from_.resize(size_);
  offset_.resize(size_);
}

namespace {
// The first `n` floats of `v`, grown (never shrunk) to hold them: buffers
// whose use changes size every call are not filled again each time.
std::span<float> at_least(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return {v.data(), n};
}

}  // namespace

namespace {
// The rows a member keeps of a weight and the view of them; nullopt where
// it keeps the whole matrix. Rows are stored back to back (in groups of
// eight when interleaved, and a share starts on a group): the share is a
// contiguous view.
struct KeptShare {
  RowShare rows;
  Matrix view;
};
std::optional<KeptShare> kept_share(const WeightToPrepare& w, int rank, const ShareWeights& weights) {
  const std::optional<RowShare> kept = w.matrix->empty() ? std::nullopt : kept_rows(w, rank, weights);
  if (!kept) return std::nullopt;
  const Matrix& m = *w.matrix;
  return KeptShare{*kept, Matrix{m.type, m.row(kept->begin), kept->rows(), m.cols, m.interleaved}};
}
}  // namespace

uint64_t TensorSplitBackend::prepare_weights(std::span<const WeightToPrepare> weights, PreparedMemory& keep) {
  std::vector<WeightToPrepare> to_inner;
  for (const WeightToPrepare& w : weights) {
    const std::optional<KeptShare> kept_view = kept_share(w, rank_, weights_);
    if (!kept_view) {
      to_inner.push_back(w);
      continue;
    }
    const RowShare* kept = &kept_view->rows;
    const Matrix& m = *w.matrix;
    const Matrix& share = kept_view->view;
    if (w.experts) {
      auto& stack = stacks_[m.data];
      if (stack) continue;  // prepared before (a stage rebuilt on the same weights)
      stack = std::make_unique<Stack>(
          Stack{m.data, m.bytes(), w.slice_rows, static_cast<int>(kept->begin / w.slice_rows), share});
      to_inner.push_back({&stack->share, w.slice_rows, false, true});
    } else {
      const bool by_heads = head_split_weight(w, size_);
      if (by_heads) {
        if (heads_ && *heads_ != w.heads) fail("internal: a stage's layers with different attention heads");
        heads_ = w.heads;
        head_share_ = head_share(w.heads, rank_, weights_);
      }
      auto& split = splits_[m.data];
      if (split) continue;
      split = std::make_unique<Split>(Split{m.rows, share, kept->begin, by_heads});
      to_inner.push_back({&split->share, 0, false});
    }
  }
  return copy_shares_ ? inner().prepare_weights(to_inner, keep) : 0;
}

uint64_t TensorSplitBackend::prepared_bytes(std::span<const WeightToPrepare> weights) const {
  std::vector<Matrix> shares;
  shares.reserve(weights.size());
  std::vector<WeightToPrepare> to_inner;
  for (const WeightToPrepare& w : weights) {
    const std::optional<KeptShare> kept = kept_share(w, rank_, weights_);
    if (!kept) {
      to_inner.push_back(w);
      continue;
    }
    shares.push_back(kept->view);
    to_inner.push_back({&shares.back(), w.slice_rows, false, w.experts});
  }
  return inner().prepared_bytes(to_inner);
}

const TensorSplitBackend::Split* TensorSplitBackend::find(const Matrix& w) const {
  auto it = splits_.find(w.data);
  return it == splits_.end() || it->second->rows != w.rows ? nullptr : it->second.get();
}

const Matrix* TensorSplitBackend::held_expert(const Matrix& w, Matrix& view) const {
  if (stacks_.empty()) return &w;
  auto it = stacks_.upper_bound(w.data);
  if (it == stacks_.begin()) return &w;
  const Stack& stack = *std::prev(it)->second;
  if (w.data >= stack.data + stack.bytes || w.rows != stack.slice_rows) return &w;
  const int expert = static_cast<int>((w.data - stack.data) / (stack.slice_rows * w.row_stride()));
  const int held = static_cast<int>(stack.share.rows / stack.slice_rows);
  if (expert < stack.first || expert >= stack.first + held)
    fail("internal: expert {} is run here, but this member holds experts {}-{}", expert, stack.first,
         stack.first + held - 1);
  const size_t slice = static_cast<size_t>(stack.slice_rows) * stack.share.row_stride();
  view = Matrix{stack.share.type, stack.share.data + (expert - stack.first) * slice, stack.slice_rows,
                stack.share.cols, stack.share.interleaved};
  return &view;
}

bool TensorSplitBackend::holds_expert(int expert, int n_expert) const {
  if (!expert_split(n_expert, size_)) return true;
  const RowShare held = expert_share(n_expert, rank_, weights_);
  return expert >= held.begin && expert < held.end;
}

void TensorSplitBackend::run_routed_experts(const HostRoutes& routes, const std::function<void(int)>& run,
                                            DevicePtr out, float* slots) {
  settle();
  const int n_expert = routes.n_expert, width = routes.width;
  const int* slot_expert = routes.slot_expert;
  const size_t n_slots = routes.n_slots;
  // Who holds each expert, once per call (not once per slot and member).
  // Every member holds them all when there are fewer experts than members.
  const bool split = expert_split(n_expert, size_);
  owner_.assign(static_cast<size_t>(n_expert), rank_);
  for (int p = 0; split && p < size_; ++p) {
    const RowShare held = expert_share(n_expert, p, weights_);
    std::fill(owner_.begin() + held.begin, owner_.begin() + held.end, p);
  }
  for (int e = 0; e < n_expert; ++e)
    if (owner_[e] == rank_) run(e);
  inner().download(slots, out, n_slots * static_cast<size_t>(width) * sizeof(float));
  if (!split) return;
  auto owner = [&](int expert) { return owner_[expert]; };
  // Each member's slots in slot order: what it computed, what the others read back.
  std::fill(offset_.begin(), offset_.end(), 0);
  for (size_t i = 0; i < n_slots; ++i) ++offset_[owner(slot_expert[i])];
  const std::span<float> mine = at_least(expert_mine_, static_cast<size_t>(offset_[rank_]) * width);
  expert_theirs_.resize(size_);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) from_[p] = at_least(expert_theirs_[p], static_cast<size_t>(offset_[p]) * width);
  size_t at = 0;
  for (size_t i = 0; i < n_slots; ++i)
    if (owner(slot_expert[i]) == rank_)
      std::memcpy(mine.data() + (at++) * width, slots + i * width, width * sizeof(float));
  exchange_->all_gather(mine, from_);
  ++exchanges_;
  std::fill(offset_.begin(), offset_.end(), 0);
  for (size_t i = 0; i < n_slots; ++i) {
    const int p = owner(slot_expert[i]);
    if (p != rank_)
      std::memcpy(slots + i * width, from_[p].data() + (offset_[p]++) * width, width * sizeof(float));
  }
}

DevicePtr TensorSplitBackend::scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {  // grows to the largest step's, then stays
    scratch_ = inner().allocate(bytes);
    scratch_bytes_ = bytes;
  }
  return DevicePtr{scratch_.get(), 0};
}

void TensorSplitBackend::matmul(const Matrix& w, DevicePtr x, DevicePtr y, int n_tokens) {
  const MatmulOutput one{&w, y};
  matmuls({&one, 1}, x, n_tokens);
}

template <class ShareOf>
void TensorSplitBackend::place_shares(DevicePtr y, int64_t n, int64_t whole, ShareOf share_of) {
  // Straight into y where it is host memory, else whole rows here, then one upload.
  float* host = inner().host_floats(y);
  const std::span<float> rows = host ? std::span<float>(host, n * whole) : at_least(whole_, static_cast<size_t>(n * whole));
  for (int p = 0; p < size_; ++p) {
    const RowShare share = share_of(p);
    const float* src = (p == rank_ ? mine_.data() : theirs_[p].data()) + offset_[p];
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(rows.data() + t * whole + share.begin, src + t * share.rows(), share.rows() * sizeof(float));
    offset_[p] += n * share.rows();
  }
  if (!host) inner().upload(y, rows.data(), rows.size_bytes());
}

void TensorSplitBackend::matmuls(std::span<const MatmulOutput> outputs, DevicePtr x, int n_tokens) {
  settle();
  split_of_.clear();
  inner_outputs_.clear();
  expert_views_.resize(outputs.size());
  int64_t held_width = 0;  // floats per token of this member's shares, all outputs together
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Split* split = find(*outputs[i].w);
    split_of_.push_back(split);
    if (split) held_width += split->share.rows;
    inner_outputs_.push_back({held_expert(*outputs[i].w, expert_views_[i]), outputs[i].y});
  }
  if (held_width == 0) {
    inner().matmuls(inner_outputs_, x, n_tokens);
    return;
  }
  // This member's rows of each split output, [n][share] one after another in the scratch.
  const int64_t n = n_tokens;
  const DevicePtr shares = scratch(static_cast<size_t>(n * held_width) * sizeof(float));
  int64_t at = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!split_of_[i]) continue;  // run whole (or as a held expert), straight into its output
    inner_outputs_[i] = {&split_of_[i]->share, shares + at};
    at += n * split_of_[i]->share.rows;
  }
  inner().matmuls(inner_outputs_, x, n_tokens);

  // A head's rows stay here: into their columns of the output, the others'
  // left as they were. The rest wait for the op that reads them.
  at = 0;
  pending_rows_.clear();
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Split* s = split_of_[i];
    if (!s) continue;
    if (s->by_heads)
      inner().copy_rows(outputs[i].y + s->at, s->rows, shares + at, s->share.rows, s->share.rows, n);
    else
      pending_rows_.push_back({outputs[i].y, s, shares + at});
    at += n * s->share.rows;
  }
  pending_rows_tokens_ = n;
}

void TensorSplitBackend::gather_rows() {
  const int64_t n = pending_rows_tokens_;
  // Trade: each member's shares in output order, as it computed them.
  int64_t mine_width = 0;
  for (const PendingRows& r : pending_rows_) mine_width += r.split->share.rows;
  const std::span<float> mine = at_least(mine_, static_cast<size_t>(n * mine_width));
  int64_t sent = 0;
  for (const PendingRows& r : pending_rows_) {
    inner().download(mine.data() + sent, r.held, static_cast<size_t>(n * r.split->share.rows) * sizeof(float));
    sent += n * r.split->share.rows;
  }
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    int64_t width = 0;
    for (const PendingRows& r : pending_rows_) width += row_share(r.split->rows, p, weights_).rows();
    from_[p] = at_least(theirs_[p], static_cast<size_t>(n * width));
  }
  exchange_->all_gather(mine, from_);
  ++exchanges_;

  // Each split output whole: member p's rows [begin, end) of every token.
  offset_.assign(size_, 0);
  for (const PendingRows& r : pending_rows_)
    place_shares(r.y, n, r.split->rows, [&](int p) { return row_share(r.split->rows, p, weights_); });
  pending_rows_.clear();
}

template <class Activation>
void TensorSplitBackend::gated(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n, Activation activation) {
  const bool held = pending_rows_.size() == 2;
  const PendingRows* g = held ? &pending_rows_[0] : nullptr;
  const PendingRows* u = held ? &pending_rows_[1] : nullptr;
  if (held && g->y == gate && u->y == up && g->split->rows == u->split->rows && g->split->at == u->split->at &&
      g->split->share.rows == u->split->share.rows && n == pending_rows_tokens_ * g->split->rows) {
    activation(g->held, u->held, g->held, pending_rows_tokens_ * g->split->share.rows);
    pending_rows_ = {PendingRows{out, g->split, g->held}};
    return;
  }
  settle();
  activation(gate, up, out, n);
}

void TensorSplitBackend::swiglu(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) {
  gated(gate, up, out, n, [&](DevicePtr a, DevicePtr b, DevicePtr y, int64_t m) { inner().swiglu(a, b, y, m); });
}

void TensorSplitBackend::geglu(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) {
  gated(gate, up, out, n, [&](DevicePtr a, DevicePtr b, DevicePtr y, int64_t m) { inner().geglu(a, b, y, m); });
}

void TensorSplitBackend::sigmoid_mul(DevicePtr x, DevicePtr gate, int64_t n) {
  // An output gate on attention's heads: each member gates its own heads' columns before they are gathered.
  if (!pending_ || !(x == pending_->out)) settle();
  inner().sigmoid_mul(x, gate, n);
}

DevicePtr TensorSplitBackend::head_scratch(int n_tokens) {
  // Room for every copy a step of n_tokens makes (the KV heads stored, the
  // queries and outputs attended, the part gathered): the same size for
  // each call of a step, so it grows at a step's first call only.
  const size_t bytes = head_scratch_bytes(*heads_, head_share_, n_tokens);
  if (bytes > head_scratch_bytes_) {
    head_scratch_ = inner().allocate(bytes);
    head_scratch_bytes_ = bytes;
  }
  return DevicePtr{head_scratch_.get(), 0};
}

void TensorSplitBackend::kv_store(const KvLayer& kv, DevicePtr k, DevicePtr v, int n_tokens) {
  settle();
  if (!divides_heads()) {
    inner().kv_store(kv, k, v, n_tokens);
    return;
  }
  // This member's KV heads, side by side, as its narrower cache holds them.
  const int64_t d = heads_->head_dim, n = n_tokens, whole = d * heads_->n_head_kv, held = d * head_share_.kv_heads();
  if (kv.width != held || kv.v_in_k)
    fail("internal: a cache of {} values a row where this member holds {} of {}", kv.width, held, whole);
  const DevicePtr k_held = head_scratch(n_tokens), v_held = k_held + n * held;
  const int64_t at = d * head_share_.kv_begin;
  inner().copy_rows(k_held, held, k + at, whole, held, n);
  inner().copy_rows(v_held, held, v + at, whole, held, n);
  inner().kv_store(kv, k_held, v_held, n_tokens);
}

void TensorSplitBackend::attention(DevicePtr q, const KvLayer& kv, int n_tokens, const AttentionShape& shape,
                                DevicePtr out) {
  settle();
  if (!divides_heads()) {
    inner().attention(q, kv, n_tokens, shape, out);
    return;
  }
  const AttentionHeads& h = *heads_;
  const HeadShare& mine = head_share_;
  if (shape.n_head != h.n_head || shape.n_head_kv != h.n_head_kv || shape.head_dim != h.head_dim ||
      shape.v_dim() != h.head_dim)
    fail("internal: attention over {}/{} heads of {} where the weights gave {}/{} of {}", shape.n_head,
         shape.n_head_kv, shape.head_dim, h.n_head, h.n_head_kv, h.head_dim);
  const int group = h.n_head / h.n_head_kv;
  const int64_t n = n_tokens, d = h.head_dim, dv = shape.v_dim();
  // Query heads over the KV heads they read: in one go when the share is
  // whole KV heads, else one KV head (and its queries here) at a time.
  const bool whole_kv_heads = mine.q_begin == mine.kv_begin * group && mine.q_end == mine.kv_end * group;
  for (int j0 = mine.kv_begin; j0 < mine.kv_end;) {
    const int j1 = whole_kv_heads ? mine.kv_end : j0 + 1;
    const int q0 = std::max(mine.q_begin, j0 * group), q1 = std::min(mine.q_end, j1 * group), nq = q1 - q0;
    const DevicePtr q_held = head_scratch(n_tokens);
    const DevicePtr out_held = q_held + n * nq * d;
    inner().copy_rows(q_held, nq * d, q + q0 * d, h.n_head * d, nq * d, n);
    KvLayer heads = kv;  // KV heads [j0, j1) of the held ones
    heads.k = kv.k.bytes(row_bytes(kv.k_type, (j0 - mine.kv_begin) * d));
    heads.v = kv.v.bytes(row_bytes(kv.v_type, (j0 - mine.kv_begin) * dv));
    heads.width = static_cast<int>((j1 - j0) * d);
    AttentionShape part = shape;
    part.n_head = nq;
    part.n_head_kv = j1 - j0;
    if (shape.sinks) {
      sinks_view_ = Matrix{DType::F32, shape.sinks->data + q0 * sizeof(float), 1, nq};
      part.sinks = &sinks_view_;
    }
    inner().attention(q_held, heads, n_tokens, part, out_held);
    inner().copy_rows(out + q0 * dv, h.n_head * dv, out_held, nq * dv, nq * dv, n);
    j0 = j1;
  }
  pending_ = PendingHeads{out, n_tokens, static_cast<int>(dv)};
}

void TensorSplitBackend::settle() {
  if (!pending_rows_.empty()) gather_rows();
  if (!pending_) return;
  const PendingHeads p = *pending_;
  pending_.reset();
  const AttentionHeads& h = *heads_;
  const int64_t n = p.n_tokens, whole = int64_t{h.n_head} * p.v_dim;
  auto columns = [&](int member) {
    const HeadShare s = head_share(h, member, weights_);
    return RowShare{int64_t{s.q_begin} * p.v_dim, int64_t{s.q_end} * p.v_dim};
  };
  const RowShare own = columns(rank_);
  const std::span<float> mine = at_least(mine_, static_cast<size_t>(n * own.rows()));
  const DevicePtr held = head_scratch(p.n_tokens);
  inner().copy_rows(held, own.rows(), p.out + own.begin, whole, own.rows(), n);
  inner().download(mine.data(), held, mine.size_bytes());
  for (int m = 0; m < size_; ++m)
    if (m != rank_) from_[m] = at_least(theirs_[m], static_cast<size_t>(n * columns(m).rows()));
  exchange_->all_gather(mine, from_);
  ++exchanges_;
  offset_.assign(size_, 0);
  place_shares(p.out, n, whole, columns);
}

}  // namespace shoal
