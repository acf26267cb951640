#include "engine/local_stage.h"

#include <fmt/format.h>

#include "util/error.h"

namespace shoal {

LocalStage::LocalStage(Backend& backend, const ModelConfig& config, const ModelWeights& weights, int begin, int end,
                       int n_seq, int n_ctx, int max_tokens, KvTypes kv_types, int kv_heads, int rewind_rows)
    : backend_(backend),
      config_(config),
      weights_(weights),
      begin_(begin),
      end_(end),
      max_tokens_(max_tokens),
      kv_heads_(kv_heads),
      ends_model_(end == config.n_layer),
      kv_(backend, config, begin, end, n_seq, n_ctx, max_tokens, kv_types, kv_heads, std::max(rewind_rows, 0)),
      state_(backend, config, begin, end, n_seq, rewind_rows),
      scratch_(backend, config, max_tokens) {
  if (begin < 0 || end > config.n_layer || begin >= end)
    fail("bad layer range [{}, {}) for a model of {} layers", begin, end, config.n_layer);
  for (OptionalOp op : optional_ops_for(config, begin, end))
    if (!backend.runs(op))
      fail("the {} backend does not run {}, which {} layers {}-{} need (run them on the CPU)", backend.name(),
           optional_op_name(op), config.arch, begin, end - 1);
}

std::string LocalStage::describe() const {
  return fmt::format("{} layers {}-{}", backend_.name(), begin_, end_ - 1);
}

std::vector<StageDevice> LocalStage::devices() const {
  StageDevice d;
  d.address = "local";
  d.backend = backend_.name();
  d.layer_begin = begin_;
  d.layer_end = end_;
  for (int l = begin_; l < end_; ++l) {
    for (const Matrix& m : weights_.layers[l].tensors)
      if (!m.empty()) d.weight_bytes += m.bytes();
  }
  d.kv_bytes = kv_bytes();
  d.free_after = backend_.free_memory();  // what the device has free now
  return {d};
}

void LocalStage::run_layers(const Batch& batch) {
  const int n = batch.size();
  // The model's last layer finishes only the rows that want logits (the
  // head reads no others, unless the batch asks for all): the contract of
  // Stage::forward.
  const std::vector<int32_t>* rows_out = ends_model_ && batch.finished_rows(rows_out_) ? &rows_out_ : nullptr;
  for (int l = begin_; l < end_; ++l)
    forward_layer(backend_, config_, l, weights_.layers[l], weights_.rope_freqs, SequenceMemory{kv_, state_},
                  l - begin_, n, scratch_, l == end_ - 1 ? rows_out : nullptr);
}

void LocalStage::rewind(int seq, int n_pos) {
  if (!rewind_delta_nets(backend_, config_, weights_.layers, begin_, end_, state_, seq, n_pos, scratch_))
    fail("sequence {} cannot go back from {} to {} positions: its recurrent state keeps only its last step", seq,
         kv_.length(seq), n_pos);
}

void LocalStage::truncate_sequence(int seq, int n_pos) {
  if (config_.has_recurrent_layers() && seq >= 0 && seq < kv_.n_seq() && n_pos > 0 && n_pos < kv_.length(seq))
    rewind(seq, n_pos);
  kv_.truncate(seq, n_pos);
}

LayerCache LocalStage::read_cache(int seq, int layer) {
  if (kv_heads_ > 0) fail("a tensor group member holds a share of each layer's cache: it cannot be moved");
  if (layer < begin_ || layer >= end_) fail("layer {} is not in this stage (layers {}-{})", layer, begin_, end_ - 1);
  const int index = layer - begin_;
  return {kv_.length(seq),
          config_.recurrent(layer) ? state_.read_state(backend_, index, seq) : kv_.read_rows(index, seq)};
}

void LocalStage::write_cache(int seq, int layer, const LayerCache& c) {
  if (kv_heads_ > 0) fail("a tensor group member holds a share of each layer's cache: it cannot be moved");
  if (layer < begin_ || layer >= end_) fail("layer {} is not in this stage (layers {}-{})", layer, begin_, end_ - 1);
  const int index = layer - begin_;
  try {
    if (config_.recurrent(layer))
      state_.write_state(backend_, index, seq, c.bytes);
    else
      kv_.write_rows(index, seq, c.length, c.bytes);
  } catch (const Error& e) {
    fail("layer {}: {}", layer, e.what());
  }
  kv_.set_length(seq, c.length);
}

bool LocalStage::admit(const Batch& batch) {
  bool rewound = false;
  if (config_.has_recurrent_layers()) {
    for (int t = 0; t < batch.size(); ++t) {
      const int seq = batch.seq_ids[t], p = batch.positions[t];
      // A sequence's first row in the batch: where it goes on from; its
      // later rows must follow it one by one (a state only goes on).
      int before = -1;
      for (int u = 0; u < t; ++u)
        if (batch.seq_ids[u] == seq) before = u;
      if (before >= 0) {
        if (p != batch.positions[before] + 1)
          fail("position {} of sequence {} does not follow position {} in the batch: a recurrent state only goes on",
               p, seq, batch.positions[before]);
        continue;
      }
      if (seq >= 0 && seq < kv_.n_seq() && p > 0 && p < kv_.length(seq)) {
        truncate_sequence(seq, p);
        rewound = true;
      }
    }
  }
  kv_.admit(batch.seq_ids.data(), batch.positions.data(), batch.size());
  state_.begin_step(batch);
  return rewound;
}

// The rows as they travel into the residual stream, and back: a model
// with per-layer inputs (gemma4 E2B/E4B) carries them beside each row
// (ModelConfig::activation_width); the layers read them where they are,
// never change them.
void LocalStage::take_rows(DevicePtr rows, int n) {
  const int width = config_.n_embd, side = config_.side_width();
  if (side == 0) return backend_.copy(scratch_.x, rows, static_cast<size_t>(n) * width * sizeof(float));
  backend_.copy_rows(scratch_.x, width, rows, width + side, width, n);
  scratch_.side = rows + width;
}

void LocalStage::give_rows(DevicePtr rows, int n) {
  const int width = config_.n_embd, side = config_.side_width();
  if (side == 0) return backend_.copy(rows, scratch_.x, static_cast<size_t>(n) * width * sizeof(float));
  backend_.copy_rows(rows, width + side, scratch_.x, width, width, n);
}

void LocalStage::forward(const Batch& batch, float* hidden) {
  if (batch.size() > max_tokens_) fail("batch of {} tokens exceeds the stage's {}", batch.size(), max_tokens_);
  const int n = batch.size();
  const size_t bytes = static_cast<size_t>(n) * config_.activation_width() * sizeof(float);
  const bool wide = config_.side_width() > 0;
  admit(batch);
  backend_.begin_step(batch.seq_ids.data(), batch.positions.data(), n);
  try {
    backend_.upload(wide ? scratch_.wide : scratch_.x, hidden, bytes);
    if (wide) take_rows(scratch_.wide, n);
    run_layers(batch);
    if (wide) give_rows(scratch_.wide, n);
    backend_.download(hidden, wide ? scratch_.wide : scratch_.x, bytes);
  } catch (...) {
    backend_.abandon_step();
    throw;
  }
  backend_.finish_step();
}

void LocalStage::forward_on_device(const Batch& batch, DevicePtr rows) {
  if (batch.size() > max_tokens_) fail("batch of {} tokens exceeds the stage's {}", batch.size(), max_tokens_);
  // Inside the caller's step: a rewind's own step ended it, so it begins again.
  if (admit(batch)) backend_.begin_step(batch.seq_ids.data(), batch.positions.data(), batch.size());
  take_rows(rows, batch.size());
  run_layers(batch);
  give_rows(rows, batch.size());
}

}  // namespace shoal
