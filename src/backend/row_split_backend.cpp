#include "backend/row_split_backend.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

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

RowSplitBackend::RowSplitBackend(std::unique_ptr<Backend> inner, std::shared_ptr<RowExchange> exchange, int rank,
                                 ShareWeights weights)
    : inner_(std::move(inner)),
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

std::optional<RowShare> kept_rows(const WeightToPrepare& w, int rank, const ShareWeights& weights) {
  const int size = static_cast<int>(weights.size());
  if (expert_split_weight(w, size)) return expert_rows(w, rank, weights);
  if (row_split_weight(w, size)) return row_share(w.matrix->rows, rank, weights);
  return std::nullopt;
}

uint64_t RowSplitBackend::prepare_weights(std::span<const WeightToPrepare> weights, PreparedMemory& keep) {
  std::vector<WeightToPrepare> inner;
  for (const WeightToPrepare& w : weights) {
    const std::optional<RowShare> kept = w.matrix->empty() ? std::nullopt : kept_rows(w, rank_, weights_);
    if (!kept) {
      inner.push_back(w);
      continue;
    }
    // Rows are stored back to back (in groups of eight when interleaved,
    // and a share starts on a group): the share is a contiguous view.
    const Matrix& m = *w.matrix;
    const Matrix share{m.type, m.row(kept->begin), kept->rows(), m.cols, m.interleaved};
    if (w.experts) {
      auto& stack = stacks_[m.data];
      if (stack) continue;  // prepared before (a stage rebuilt on the same weights)
      stack = std::make_unique<Stack>(
          Stack{m.data, m.bytes(), w.slice_rows, static_cast<int>(kept->begin / w.slice_rows), share});
      inner.push_back({&stack->share, w.slice_rows, false, true});
    } else {
      auto& split = splits_[m.data];
      if (split) continue;
      split = std::make_unique<Split>(Split{m.rows, share});
      inner.push_back({&split->share, 0, false});
    }
  }
  return copy_shares_ ? inner_->prepare_weights(inner, keep) : 0;
}

uint64_t RowSplitBackend::prepared_bytes(std::span<const WeightToPrepare> weights) const {
  std::vector<Matrix> shares;
  shares.reserve(weights.size());
  std::vector<WeightToPrepare> inner;
  for (const WeightToPrepare& w : weights) {
    const std::optional<RowShare> kept = w.matrix->empty() ? std::nullopt : kept_rows(w, rank_, weights_);
    if (!kept) {
      inner.push_back(w);
      continue;
    }
    const Matrix& m = *w.matrix;
    shares.push_back(Matrix{m.type, m.row(kept->begin), kept->rows(), m.cols, m.interleaved});
    inner.push_back({&shares.back(), w.slice_rows, false, w.experts});
  }
  return inner_->prepared_bytes(inner);
}

const RowSplitBackend::Split* RowSplitBackend::find(const Matrix& w) const {
  auto it = splits_.find(w.data);
  return it == splits_.end() || it->second->rows != w.rows ? nullptr : it->second.get();
}

const Matrix* RowSplitBackend::held_expert(const Matrix& w, Matrix& view) const {
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

bool RowSplitBackend::holds_expert(int expert, int n_expert) const {
  if (!expert_split(n_expert, size_)) return true;
  const RowShare held = expert_share(n_expert, rank_, weights_);
  return expert >= held.begin && expert < held.end;
}

void RowSplitBackend::share_expert_rows(float* slots, const int* slot_expert, size_t n_slots, int width,
                                        int n_expert) {
  if (!expert_split(n_expert, size_)) return;
  auto owner = [&](int expert) {
    for (int p = 0; p < size_; ++p)
      if (expert < expert_share(n_expert, p, weights_).end) return p;
    return size_ - 1;
  };
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

DevicePtr RowSplitBackend::scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {  // grows to the largest step's, then stays
    scratch_ = inner_->allocate(bytes);
    scratch_bytes_ = bytes;
  }
  return DevicePtr{scratch_.get(), 0};
}

void RowSplitBackend::matmul(const Matrix& w, DevicePtr x, DevicePtr y, int n_tokens) {
  const MatmulOutput one{&w, y};
  matmuls({&one, 1}, x, n_tokens);
}

void RowSplitBackend::matmuls(std::span<const MatmulOutput> outputs, DevicePtr x, int n_tokens) {
  split_of_.clear();
  inner_outputs_.clear();
  expert_views_.resize(outputs.size());
  int64_t mine_width = 0;  // floats per token of this member's shares, all outputs together
  for (size_t i = 0; i < outputs.size(); ++i) {
    split_of_.push_back(find(*outputs[i].w));
    if (split_of_.back()) mine_width += split_of_.back()->share.rows;
    inner_outputs_.push_back({held_expert(*outputs[i].w, expert_views_[i]), outputs[i].y});
  }
  if (std::none_of(split_of_.begin(), split_of_.end(), [](const Split* s) { return s != nullptr; })) {
    inner_->matmuls(inner_outputs_, x, n_tokens);
    return;
  }
  // This member's rows of each split output, [n][share] one after another in the scratch.
  const int64_t n = n_tokens;
  const DevicePtr shares = scratch(static_cast<size_t>(n * std::max<int64_t>(mine_width, 1)) * sizeof(float));
  int64_t at = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!split_of_[i]) continue;  // run whole (or as a held expert), straight into its output
    inner_outputs_[i] = {&split_of_[i]->share, shares + at};
    at += n * split_of_[i]->share.rows;
  }
  inner_->matmuls(inner_outputs_, x, n_tokens);

  // Trade: each member's shares in output order, as it computed them.
  const std::span<float> mine = at_least(mine_, static_cast<size_t>(n * mine_width));
  inner_->download(mine.data(), shares, mine.size_bytes());
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    int64_t width = 0;
    for (const Split* s : split_of_)
      if (s) width += row_share(s->rows, p, weights_).rows();
    from_[p] = at_least(theirs_[p], static_cast<size_t>(n * width));
  }
  exchange_->all_gather(mine, from_);
  ++exchanges_;

  // Each split output whole: member p's rows [begin, end) of every token.
  offset_.assign(size_, 0);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Split* s = split_of_[i];
    if (!s) continue;
    const std::span<float> whole = at_least(whole_, static_cast<size_t>(n * s->rows));
    for (int p = 0; p < size_; ++p) {
      const RowShare share = row_share(s->rows, p, weights_);
      const float* src = (p == rank_ ? mine.data() : theirs_[p].data()) + offset_[p];
      for (int64_t t = 0; t < n; ++t)
        std::memcpy(whole.data() + t * s->rows + share.begin, src + t * share.rows(), share.rows() * sizeof(float));
      offset_[p] += n * share.rows();
    }
    inner_->upload(outputs[i].y, whole.data(), whole.size_bytes());
  }
}

}  // namespace shoal
