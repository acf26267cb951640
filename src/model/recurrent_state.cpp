#include "model/recurrent_state.h"

#include <algorithm>

#include "util/error.h"

namespace shoal {

size_t RecurrentState::rewind_bytes(const ModelConfig& c, int n_seq, int rewind_rows) {
  if (rewind_rows <= 0) return 0;
  const size_t state = (c.delta.conv_state_floats() + c.delta.ssm_state_floats()) * sizeof(float);
  const size_t inputs = static_cast<size_t>(rewind_rows) * (c.delta.conv_width() + 2 * c.delta.n_v_heads) * sizeof(float);
  return static_cast<size_t>(n_seq) * (state + inputs);
}

size_t RecurrentState::bytes_for(const ModelConfig& c, int begin, int end, int n_seq, int rewind_rows) {
  size_t layers = 0;
  for (int l = begin; l < end; ++l) layers += c.recurrent(l) ? 1 : 0;
  return layers * (n_seq * (c.delta.conv_state_floats() + c.delta.ssm_state_floats()) * sizeof(float) +
                   rewind_bytes(c, n_seq, rewind_rows));
}

RecurrentState::RecurrentState(Backend& backend, const ModelConfig& c, int begin, int end, int n_seq, int rewind_rows)
    : conv_seq_bytes_(c.delta.conv_state_floats() * sizeof(float)),
      ssm_seq_bytes_(c.delta.ssm_state_floats() * sizeof(float)),
      conv_width_(c.delta.conv_width()),
      n_v_heads_(c.delta.n_v_heads),
      rewind_rows_(c.has_recurrent_layers() ? std::max(rewind_rows, 0) : 0),  // nothing to keep without a DeltaNet
      kept_(n_seq) {
  if (begin < 0 || end > c.n_layer || begin >= end)
    fail("bad layer range [{}, {}) for a model of {} layers", begin, end, c.n_layer);
  layers_.resize(end - begin);
  const size_t rows = static_cast<size_t>(n_seq) * rewind_rows_;
  for (int l = begin; l < end; ++l) {
    if (!c.recurrent(l)) continue;
    Layer& layer = layers_[l - begin];
    layer.conv = backend.allocate(conv_seq_bytes_ * n_seq);
    layer.ssm = backend.allocate(ssm_seq_bytes_ * n_seq);
    if (rewind_rows_ > 0) {
      layer.conv_before = backend.allocate(conv_seq_bytes_ * n_seq);
      layer.ssm_before = backend.allocate(ssm_seq_bytes_ * n_seq);
      layer.mixed = backend.allocate(rows * conv_width_ * sizeof(float));
      layer.alpha = backend.allocate(rows * n_v_heads_ * sizeof(float));
      layer.beta = backend.allocate(rows * n_v_heads_ * sizeof(float));
    }
    bytes_ += (conv_seq_bytes_ + ssm_seq_bytes_) * n_seq + rewind_bytes(c, n_seq, rewind_rows_);
  }
}

RecurrentLayer RecurrentState::layer(int index) const {
  const Layer& l = layers_.at(index);
  if (!l.ssm) fail("internal: layer {} of the stage has no recurrent state", index);
  return RecurrentLayer{DevicePtr{l.conv.get(), 0}, DevicePtr{l.ssm.get(), 0}, conv_seq_bytes_, ssm_seq_bytes_};
}

void RecurrentState::begin_step(const Batch& batch) {
  step_kept_.clear();
  if (rewind_rows_ == 0) return;
  // A sequence in this step starts its last step anew: its rows, in order.
  std::vector<int>& seqs = step_seqs_;
  seqs.clear();
  for (int t = 0; t < batch.size(); ++t) {
    Kept& k = kept_.at(batch.seq_ids[t]);
    if (std::find(seqs.begin(), seqs.end(), batch.seq_ids[t]) == seqs.end()) {
      seqs.push_back(batch.seq_ids[t]);
      k.rows = 0;
      k.first = batch.positions[t];
      k.batch_rows.clear();
    }
    k.batch_rows.push_back(t);
  }
  for (int seq : seqs) {
    Kept& k = kept_[seq];
    const int n = static_cast<int>(k.batch_rows.size());
    bool consecutive = n >= 2 && n <= rewind_rows_;
    for (int i = 0; consecutive && i < n; ++i) consecutive = batch.positions[k.batch_rows[i]] == k.first + i;
    if (consecutive) {
      k.rows = n;
      step_kept_.push_back(seq);
    }
  }
}

namespace {
DevicePtr at(const std::unique_ptr<Buffer>& buffer, size_t bytes) { return DevicePtr{buffer.get(), 0}.bytes(bytes); }
}  // namespace

void RecurrentState::keep(Backend& be, int index, DevicePtr mixed, DevicePtr alpha, DevicePtr beta) const {
  if (step_kept_.empty()) return;
  const Layer& l = layers_.at(index);
  const size_t mixed_row = conv_width_ * sizeof(float), head_row = n_v_heads_ * sizeof(float);
  for (int seq : step_kept_) {
    const Kept& k = kept_[seq];
    be.copy(at(l.conv_before, seq * conv_seq_bytes_), at(l.conv, seq * conv_seq_bytes_), conv_seq_bytes_);
    be.copy(at(l.ssm_before, seq * ssm_seq_bytes_), at(l.ssm, seq * ssm_seq_bytes_), ssm_seq_bytes_);
    for (int i = 0; i < k.rows; ++i) {
      const size_t slot = static_cast<size_t>(seq) * rewind_rows_ + i, row = k.batch_rows[i];
      be.copy(at(l.mixed, slot * mixed_row), mixed.bytes(row * mixed_row), mixed_row);
      be.copy(at(l.alpha, slot * head_row), alpha.bytes(row * head_row), head_row);
      be.copy(at(l.beta, slot * head_row), beta.bytes(row * head_row), head_row);
    }
  }
}

std::optional<RecurrentState::Rewind> RecurrentState::rewind_for(int seq, int n_pos) const {
  const Kept& k = kept_.at(seq);
  if (k.rows == 0 || n_pos < k.first || n_pos > k.first + k.rows) return std::nullopt;
  return Rewind{k.first, n_pos - k.first};
}

void RecurrentState::restore(Backend& be, int index, int seq, int rows, DevicePtr mixed, DevicePtr alpha,
                             DevicePtr beta) const {
  const Layer& l = layers_.at(index);
  if (!l.conv_before) fail("internal: layer {} keeps no step to take back", index);
  be.copy(at(l.conv, seq * conv_seq_bytes_), at(l.conv_before, seq * conv_seq_bytes_), conv_seq_bytes_);
  be.copy(at(l.ssm, seq * ssm_seq_bytes_), at(l.ssm_before, seq * ssm_seq_bytes_), ssm_seq_bytes_);
  if (rows <= 0) return;
  const size_t first = static_cast<size_t>(seq) * rewind_rows_;
  const size_t mixed_row = conv_width_ * sizeof(float), head_row = n_v_heads_ * sizeof(float);
  be.copy(mixed, at(l.mixed, first * mixed_row), rows * mixed_row);
  be.copy(alpha, at(l.alpha, first * head_row), rows * head_row);
  be.copy(beta, at(l.beta, first * head_row), rows * head_row);
}

std::vector<uint8_t> RecurrentState::read_state(Backend& backend, int index, int seq) const {
  const Layer& l = layers_.at(index);
  if (!l.ssm) return {};
  if (seq < 0 || seq >= static_cast<int>(kept_.size())) fail("sequence id {} is outside 0..{}", seq, kept_.size() - 1);
  std::vector<uint8_t> bytes(conv_seq_bytes_ + ssm_seq_bytes_);
  backend.download(bytes.data(), DevicePtr{l.conv.get(), seq * conv_seq_bytes_}, conv_seq_bytes_);
  backend.download(bytes.data() + conv_seq_bytes_, DevicePtr{l.ssm.get(), seq * ssm_seq_bytes_}, ssm_seq_bytes_);
  return bytes;
}

void RecurrentState::write_state(Backend& backend, int index, int seq, std::span<const uint8_t> bytes) {
  const Layer& l = layers_.at(index);
  const size_t want = l.ssm ? conv_seq_bytes_ + ssm_seq_bytes_ : 0;
  if (bytes.size() != want) fail("a recurrent state of {} bytes where this layer holds {}", bytes.size(), want);
  if (!l.ssm) return;
  if (seq < 0 || seq >= static_cast<int>(kept_.size())) fail("sequence id {} is outside 0..{}", seq, kept_.size() - 1);
  backend.upload(DevicePtr{l.conv.get(), seq * conv_seq_bytes_}, bytes.data(), conv_seq_bytes_);
  backend.upload(DevicePtr{l.ssm.get(), seq * ssm_seq_bytes_}, bytes.data() + conv_seq_bytes_, ssm_seq_bytes_);
  forget(seq);
}

}  // namespace shoal
