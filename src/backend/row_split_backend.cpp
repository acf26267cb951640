#include "backend/row_split_backend.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace shoal {

RowShare row_share(int64_t rows, int rank, int size) {
  const int64_t units = (rows + kRowShareUnit - 1) / kRowShareUnit;
  auto edge = [&](int r) { return std::min(rows, units * r / size * kRowShareUnit); };
  return {edge(rank), rank + 1 == size ? rows : edge(rank + 1)};
}

bool row_split(int64_t rows, int size) { return size > 1 && rows >= kRowShareUnit * size; }

RowSplitBackend::RowSplitBackend(std::unique_ptr<Backend> inner, std::shared_ptr<RowExchange> exchange, int rank,
                                 int size)
    : inner_(std::move(inner)), exchange_(std::move(exchange)), rank_(rank), size_(size) {
  if (size < 1 || rank < 0 || rank >= size) fail("internal: member {} of a group of {}", rank, size);
  theirs_.resize(size);
  from_.resize(size);
  offset_.resize(size);
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

uint64_t RowSplitBackend::prepare_weights(std::span<const WeightToPrepare> weights, PreparedMemory& keep) {
  std::vector<WeightToPrepare> inner;
  for (const WeightToPrepare& w : weights) {
    if (w.matrix->empty() || !row_split_weight(w, size_)) {
      inner.push_back(w);
      continue;
    }
    const Matrix& m = *w.matrix;
    auto& split = splits_[m.data];
    if (split) continue;  // prepared before (a stage rebuilt on the same weights)
    const RowShare share = row_share(m.rows, rank_, size_);
    split = std::make_unique<Split>();
    split->rows = m.rows;
    // Rows are stored back to back (in groups of eight when interleaved,
    // and a share starts on a group): the share is a contiguous view.
    split->share = Matrix{m.type, m.row(share.begin), share.rows(), m.cols, m.interleaved};
    inner.push_back({&split->share, 0, false});
  }
  return inner_->prepare_weights(inner, keep);
}

uint64_t RowSplitBackend::prepared_bytes(std::span<const WeightToPrepare> weights) const {
  std::vector<Matrix> shares;
  shares.reserve(weights.size());
  std::vector<WeightToPrepare> inner;
  for (const WeightToPrepare& w : weights) {
    if (w.matrix->empty() || !row_split_weight(w, size_)) {
      inner.push_back(w);
      continue;
    }
    const Matrix& m = *w.matrix;
    const RowShare share = row_share(m.rows, rank_, size_);
    shares.push_back(Matrix{m.type, m.row(share.begin), share.rows(), m.cols, m.interleaved});
    inner.push_back({&shares.back(), 0, false});
  }
  return inner_->prepared_bytes(inner);
}

const RowSplitBackend::Split* RowSplitBackend::find(const Matrix& w) const {
  auto it = splits_.find(w.data);
  return it == splits_.end() || it->second->rows != w.rows ? nullptr : it->second.get();
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
  int64_t mine_width = 0;  // floats per token of this member's shares, all outputs together
  for (const MatmulOutput& o : outputs) {
    split_of_.push_back(find(*o.w));
    if (split_of_.back()) mine_width += split_of_.back()->share.rows;
  }
  if (std::none_of(split_of_.begin(), split_of_.end(), [](const Split* s) { return s != nullptr; })) {
    inner_->matmuls(outputs, x, n_tokens);
    return;
  }
  // This member's rows of each split output, [n][share] one after another in the scratch.
  const int64_t n = n_tokens;
  const DevicePtr shares = scratch(static_cast<size_t>(n * std::max<int64_t>(mine_width, 1)) * sizeof(float));
  inner_outputs_.clear();
  int64_t at = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!split_of_[i]) {
      inner_outputs_.push_back(outputs[i]);
      continue;
    }
    inner_outputs_.push_back({&split_of_[i]->share, shares + at});
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
      if (s) width += row_share(s->rows, p, size_).rows();
    from_[p] = at_least(theirs_[p], static_cast<size_t>(n * width));
  }
  exchange_->all_gather(mine, from_);
  ++exchanges_;

  // Each split output whole: member p's rows [begin, end) of every token.
  offset_.assign(size_, 0);
  std::vector<int64_t>& offset = offset_;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Split* s = split_of_[i];
    if (!s) continue;
    const std::span<float> whole = at_least(whole_, static_cast<size_t>(n * s->rows));
    for (int p = 0; p < size_; ++p) {
      const RowShare share = row_share(s->rows, p, size_);
      const float* src = (p == rank_ ? mine.data() : theirs_[p].data()) + offset[p];
      for (int64_t t = 0; t < n; ++t)
        std::memcpy(whole.data() + t * s->rows + share.begin, src + t * share.rows(), share.rows() * sizeof(float));
      offset[p] += n * share.rows();
    }
    inner_->upload(outputs[i].y, whole.data(), whole.size_bytes());
  }
}

}  // namespace shoal
