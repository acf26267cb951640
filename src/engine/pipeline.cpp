#include "engine/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "engine/output_head.h"
#include "model/travelling_rows.h"
#include "util/error.h"
#include "util/log.h"

namespace shoal {

namespace {
void check_coverage(const std::vector<std::unique_ptr<Stage>>& stages, int n_layer) {
  int next = 0;
  for (const auto& s : stages) {
    if (s->layer_begin() != next) fail("internal: stages do not cover the layers contiguously at layer {}", next);
    next = s->layer_end();
  }
  if (next != n_layer) fail("internal: stages cover {} of {} layers", next, n_layer);
}
}  // namespace

Pipeline::Pipeline(const ModelConfig& config, const ModelWeights& weights, Backend& head_backend,
                   std::vector<std::unique_ptr<Stage>> stages, int max_tokens, int micro_batch)
    : config_(config),
      weights_(weights),
      head_(head_backend),
      stages_(std::move(stages)),
      max_tokens_(max_tokens),
      micro_batch_(micro_batch),
      hidden_(static_cast<size_t>(max_tokens) * config.activation_width()),
      logits_(static_cast<size_t>(config.n_vocab)),
      head_rows_(head_backend.allocate(static_cast<size_t>(max_tokens) * config.n_embd * sizeof(float))) {
  check_coverage(stages_, config.n_layer);
  stage_seconds_ = std::make_unique<std::atomic<double>[]>(kMaxStages);
  decode_seconds_ = std::make_unique<std::atomic<double>[]>(kMaxStages);
  decode_steps_ = std::make_unique<std::atomic<uint64_t>[]>(kMaxStages);
  clear_stage_times();
  if (stages_.size() > kMaxStages) fail("internal: more than {} stages", kMaxStages);
  if (const int side = config.side_width(); side > 0) {
    const size_t rows = static_cast<size_t>(max_tokens);
    layer_token_rows_ = head_backend.allocate(rows * side * sizeof(float));
    layer_inputs_ = head_backend.allocate(rows * side * sizeof(float));
    travel_rows_ = head_backend.allocate(rows * config.activation_width() * sizeof(float));
  }
}

const float* Pipeline::forward(const Batch& batch, bool keep_normed) {
  const int n = batch.size();
  if (n == 0) fail("empty batch");
  if (n > max_tokens_) fail("batch of {} tokens exceeds the maximum of {}", n, max_tokens_);
  running_ = &stages_;
  if (prompt_) {
    int on_prompt = 0;
    try {
      on_prompt = prompt_->route(batch, stages_, on_prompt_);
    } catch (const PromptStagesFailed& e) {
      lose_prompt_stages(e);
      return forward(batch, keep_normed);
    }
    if (on_prompt > 0 && on_prompt < n) return forward_split(batch, on_prompt_, keep_normed);
    if (on_prompt == n) {
      running_ = &prompt_->stages();
      const float* logits = nullptr;
      try {
        logits = forward_on_stages(batch, keep_normed);
      } catch (const std::exception& e) {
        running_ = &stages_;
        lose_prompt_stages(e);
        return forward(batch, keep_normed);
      }
      running_ = &stages_;
      prompt_->ran(batch);
      return logits;
    }
  }
  return forward_on_stages(batch, keep_normed);
}

void Pipeline::set_prompt_stages(std::vector<std::unique_ptr<Stage>> stages) {
  auto prompt = stages.empty() ? nullptr : std::make_unique<PromptStages>(std::move(stages), config_.n_layer);
  std::lock_guard<std::mutex> lock(stages_mutex_);
  prompt_ = std::move(prompt);
}

PromptStages::Moves Pipeline::cache_moves() const {
  std::lock_guard<std::mutex> lock(stages_mutex_);
  return prompt_ ? prompt_->moves() : PromptStages::Moves{};
}

std::vector<StageDevice> Pipeline::prompt_devices() const {
  std::lock_guard<std::mutex> lock(stages_mutex_);
  std::vector<StageDevice> out;
  if (prompt_)
    for (const auto& s : prompt_->stages())
      for (const StageDevice& d : s->devices()) out.push_back(d);
  return out;
}

void Pipeline::lose_prompt_stages(const std::exception& why) {
  spdlog::warn("the prompt stages failed ({}): prompts run on the decode stages from now on", why.what());
  const std::vector<int> sequences = prompt_->held_here();
  {
    std::lock_guard<std::mutex> lock(stages_mutex_);
    prompt_.reset();
  }
  // Their sequences again, from what the record holds, into the decode stages.
  for (int seq : sequences) forward_again(seq);
}

int Pipeline::forward_again(int seq) {
  const std::span<const int32_t> record = held(seq);
  const std::vector<int32_t> tokens(record.begin(), record.end());  // forward() records into held_ as it goes
  Batch batch;
  for (size_t at = 0; at < tokens.size();) {
    const size_t take = std::min(tokens.size() - at, static_cast<size_t>(max_tokens_));
    batch.clear();
    for (size_t j = 0; j < take; ++j) batch.add(tokens[at + j], static_cast<int32_t>(at + j), seq, false);
    forward(batch);
    at += take;
  }
  return static_cast<int>(tokens.size());
}

const float* Pipeline::forward_on_stages(const Batch& batch, bool keep_normed) {
  const std::vector<std::unique_ptr<Stage>>& stages = *running_;
  if (stages.size() == 1 && stages[0]->runs_on(head_)) return forward_on_device(batch, keep_normed);
  embed_rows(batch);
  // The last stage runs the head when it holds it (and the logits are not too many to send).
  const int wanted = batch.n_logits();
  const size_t stage_logits = static_cast<size_t>(wanted) * config_.n_vocab;
  const bool head_on_stage = wanted > 0 && !keep_normed && !batch.all_rows && stages.back()->runs_head() &&
                             stage_logits * sizeof(float) <= kMaxStageLogitsBytes;
  if (head_on_stage && logits_.size() < stage_logits) logits_.resize(stage_logits);
  run_stages(batch, hidden_.data(), head_on_stage ? logits_.data() : nullptr);
  record(batch);
  if (head_on_stage) return logits_.data();
  return run_head_on_rows(batch, keep_normed);
}

void Pipeline::embed_rows(const Batch& batch) {
  const int n = batch.size();
  const DevicePtr rows{head_rows_.get(), 0};
  head_.begin_step(batch.seq_ids.data(), batch.positions.data(), n);
  try {
    embed(batch, rows);
    const DevicePtr travel = travelling_rows(batch, rows);
    head_.download(hidden_.data(), travel, static_cast<size_t>(n) * config_.activation_width() * sizeof(float));
    head_.finish_step();
  } catch (...) {
    head_.abandon_step();
    throw;
  }
}

// A batch with rows of both placements: the prompts' rows on the prompt
// stages while the others' run on the plan's (a worker's step submitted,
// then the plan's stages, then its answer collected), every row back in its
// place, and one head over them all.
const float* Pipeline::forward_split(const Batch& batch, const std::vector<uint8_t>& on_prompt, bool keep_normed) {
  const int n = batch.size(), width = config_.activation_width();
  embed_rows(batch);
  Batch prompt_rows, decode_rows;
  split_rows_.assign(2, {});
  for (int t = 0; t < n; ++t) {
    Batch& b = on_prompt[t] ? prompt_rows : decode_rows;
    b.add(batch.tokens[t], batch.positions[t], batch.seq_ids[t], batch.logits[t] != 0);
    split_rows_[on_prompt[t] ? 0 : 1].push_back(t);
  }
  prompt_rows.all_rows = decode_rows.all_rows = batch.all_rows;
  split_hidden_.resize(2);
  for (int side = 0; side < 2; ++side) {
    split_hidden_[side].resize(split_rows_[side].size() * width);
    for (size_t i = 0; i < split_rows_[side].size(); ++i)
      std::memcpy(&split_hidden_[side][i * width], &hidden_[static_cast<size_t>(split_rows_[side][i]) * width],
                  width * sizeof(float));
  }
  const std::vector<std::unique_ptr<Stage>>& prompt = prompt_->stages();
  const bool submitted = prompt.size() == 1 && prompt[0]->computes_elsewhere();
  bool prompt_failed = false;
  std::string why;
  auto on_prompt_stages = [&](auto run) {
    running_ = &prompt;
    try {
      run();
    } catch (const std::exception& e) {
      prompt_failed = true;
      why = e.what();
    }
    running_ = &stages_;
  };
  if (submitted) on_prompt_stages([&] { prompt[0]->submit(prompt_rows, split_hidden_[0].data()); });
  try {
    run_stages(decode_rows, split_hidden_[1].data(), nullptr);
  } catch (...) {
    if (submitted && !prompt_failed) prompt[0]->cancel();
    throw;
  }
  record(decode_rows);
  if (!prompt_failed)
    on_prompt_stages([&] {
      if (submitted) prompt[0]->collect();
      else run_stages(prompt_rows, split_hidden_[0].data(), nullptr);
    });
  if (prompt_failed) {
    // The prompts' rows on the plan's stages instead, after what the prompt stages held.
    lose_prompt_stages(PromptStagesFailed(why));
    run_stages(prompt_rows, split_hidden_[0].data(), nullptr);
  } else {
    prompt_->ran(prompt_rows);
  }
  record(prompt_rows);
  for (int side = 0; side < 2; ++side)
    for (size_t i = 0; i < split_rows_[side].size(); ++i)
      std::memcpy(&hidden_[static_cast<size_t>(split_rows_[side][i]) * width], &split_hidden_[side][i * width],
                  width * sizeof(float));
  return run_head_on_rows(batch, keep_normed);
}

// After the stages: the head over the rows in hidden_ that want logits (or
// all of them, for a batch with all_rows).
const float* Pipeline::run_head_on_rows(const Batch& batch, bool keep_normed) {
  const int n = batch.size(), width = config_.n_embd;
  const int wanted = batch.n_logits();
  const DevicePtr rows{head_rows_.get(), 0};
  // The residual rows without the per-layer inputs they carried (gemma4 E2B/E4B).
  narrow_rows(hidden_.data(), n, config_.activation_width(), width);
  if (batch.all_rows) {
    const DevicePtr logits = wanted > 0 ? logits_buffer(wanted) : DevicePtr{};
    head_.begin_step(batch.seq_ids.data(), batch.positions.data(), n);
    try {
      head_.upload(rows, hidden_.data(), static_cast<size_t>(n) * width * sizeof(float));
      run_head_all_rows(batch, rows, logits, wanted, keep_normed);
      head_.finish_step();
    } catch (...) {
      head_.abandon_step();
      throw;
    }
    return logits_.data();
  }

  // Only rows that need logits go through the head: the vocabulary matmul
  // is the largest of the step. They move to the front, in order.
  int m = 0;
  for (int t = 0; t < n; ++t)
    if (batch.logits[t]) {
      if (m != t) std::memcpy(&hidden_[static_cast<size_t>(m) * width], &hidden_[static_cast<size_t>(t) * width],
                              width * sizeof(float));
      ++m;
    }
  if (m == 0) return logits_.data();
  const DevicePtr logits = logits_buffer(m);
  head_.begin_step(batch.seq_ids.data(), batch.positions.data(), m);
  try {
    head_.upload(rows, hidden_.data(), static_cast<size_t>(m) * width * sizeof(float));
    run_head(rows, logits, m, keep_normed);
    head_.finish_step();
  } catch (...) {
    head_.abandon_step();
    throw;
  }
  return logits_.data();
}

// The whole model on the head's device: the embedding, the layers and the
// head in one step, the rows never leaving the device; one wait, for the
// logits.
const float* Pipeline::forward_on_device(const Batch& batch, bool keep_normed) {
  const int n = batch.size();
  const DevicePtr rows{head_rows_.get(), 0};
  int m = 0;
  for (int t = 0; t < n; ++t) m += batch.logits[t] ? 1 : 0;
  const DevicePtr logits = m > 0 ? logits_buffer(m) : DevicePtr{};
  const auto t0 = std::chrono::steady_clock::now();
  head_.begin_step(batch.seq_ids.data(), batch.positions.data(), n);
  try {
    embed(batch, rows);
    const DevicePtr travel = travelling_rows(batch, rows);
    (*running_)[0]->forward_on_device(batch, travel);
    if (travel.buffer != rows.buffer)
      head_.copy_rows(rows, config_.n_embd, travel, config_.activation_width(), config_.n_embd, n);
    if (batch.all_rows) {
      run_head_all_rows(batch, rows, logits, m, keep_normed);
    } else {
      gather_logit_rows(head_, batch, rows, config_.n_embd);  // as forward() does on the host
      if (m > 0) run_head(rows, logits, m, keep_normed);
    }
    head_.finish_step();
  } catch (...) {
    head_.abandon_step();
    throw;
  }
  add_stage_time(0, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), n == 1);
  record(batch);
  return logits_.data();
}

void Pipeline::embed(const Batch& batch, DevicePtr rows) {
  const int n = batch.size();
  head_.get_rows(weights_.token_embd, batch.tokens.data(), n, rows);
  if (config_.embd_scale != 1.0f) head_.scale(rows, config_.embd_scale, static_cast<int64_t>(n) * config_.n_embd);
}

// Gemma 4 E2B/E4B, as llama.cpp computes them: each token's own rows for
// every layer (times sqrt(n_embd_per_layer)), plus the projection of its
// scaled embedding (times 1/sqrt(n_embd), normalised per layer), times
// 1/sqrt(2); placed beside each embedded row. The rows themselves where
// the model has none.
DevicePtr Pipeline::travelling_rows(const Batch& batch, DevicePtr rows) {
  const int side = config_.side_width();
  if (side == 0) return rows;
  const int n = batch.size(), width = config_.n_embd, per_layer = config_.n_embd_per_layer;
  const int64_t count = static_cast<int64_t>(n) * side;
  const DevicePtr tokens{layer_token_rows_.get(), 0}, inputs{layer_inputs_.get(), 0}, travel{travel_rows_.get(), 0};
  head_.get_rows(weights_.per_layer_token_embd, batch.tokens.data(), n, tokens);
  head_.scale(tokens, std::sqrt(static_cast<float>(per_layer)), count);
  head_.matmul(weights_.per_layer_model_proj, rows, inputs, n);
  head_.scale(inputs, 1.0f / std::sqrt(static_cast<float>(width)), count);
  head_.rmsnorm(inputs, weights_.per_layer_proj_norm, inputs, n * config_.n_layer, per_layer, config_.norm_eps);
  head_.add(inputs, tokens, count);
  head_.scale(inputs, 1.0f / std::sqrt(2.0f), count);
  head_.copy_rows(travel, width + side, rows, width, width, n);
  head_.copy_rows(travel + width, width + side, inputs, side, side, n);
  return travel;
}

DevicePtr Pipeline::logits_buffer(int m) {
  const size_t logit_count = static_cast<size_t>(m) * config_.n_vocab;
  // Grows only when more rows than ever before want logits (teacher forcing).
  if (logits_.size() < logit_count) logits_.resize(logit_count);
  if (!head_logits_ || head_logits_->bytes() < logit_count * sizeof(float))
    head_logits_ = head_.allocate(logit_count * sizeof(float));
  return {head_logits_.get(), 0};
}

void Pipeline::run_head(DevicePtr rows, DevicePtr logits, int m, bool keep_normed) {
  const int width = config_.n_embd;
  const size_t logit_count = static_cast<size_t>(m) * config_.n_vocab;
  run_output_head(head_, weights_, config_, rows, logits, m);
  head_.download(logits_.data(), logits, logit_count * sizeof(float));
  if (keep_normed) {
    normed_.resize(static_cast<size_t>(m) * width);
    head_.download(normed_.data(), rows, normed_.size() * sizeof(float));
  }
}

void Pipeline::run_head_all_rows(const Batch& batch, DevicePtr rows, DevicePtr logits, int m, bool keep_normed) {
  const int n = batch.size(), width = config_.n_embd;
  head_.rmsnorm(rows, weights_.output_norm, rows, n, width, config_.norm_eps);
  normed_rows_.resize(static_cast<size_t>(n) * width);
  head_.download(normed_rows_.data(), rows, normed_rows_.size() * sizeof(float));
  if (gather_logit_rows(head_, batch, rows, width) != m)
    fail("internal: {} rows with logits, {} expected", m, batch.n_logits());
  if (m == 0) return;
  project_to_vocabulary(head_, weights_.output, config_, rows, logits, m);
  head_.download(logits_.data(), logits, static_cast<size_t>(m) * config_.n_vocab * sizeof(float));
  if (keep_normed) {
    normed_.resize(static_cast<size_t>(m) * width);
    head_.download(normed_.data(), rows, normed_.size() * sizeof(float));
  }
}

void Pipeline::add_stage_time(size_t i, double dt, bool decode) {
  if (running_ != &stages_) return;  // the prompt stages' time is not the plan's stages'
  stage_seconds_[i].store(stage_seconds_[i].load(std::memory_order_relaxed) + dt, std::memory_order_relaxed);
  if (decode) {
    decode_seconds_[i].store(decode_seconds_[i].load(std::memory_order_relaxed) + dt, std::memory_order_relaxed);
    decode_steps_[i].store(decode_steps_[i].load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
}

void Pipeline::run_stages(const Batch& batch, float* hidden, float* logits) {
  const std::vector<std::unique_ptr<Stage>>& stages = *running_;  // the prompt stages, or the plan's
  const int n = batch.size();
  const bool overlap = std::any_of(stages.begin(), stages.end(), [](auto& s) { return s->computes_elsewhere(); });
  if (micro_batch_ > 0 && n >= 2 * micro_batch_ && stages.size() >= 2 && overlap)
    return run_pipelined(batch, hidden, logits);
  for (size_t i = 0; i < stages.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (logits && i + 1 == stages.size()) stages[i]->head_into(logits);
    stages[i]->forward(batch, hidden);
    add_stage_time(i, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), n == 1);
  }
}

// A wavefront: at tick t, stage s runs micro-batch t - s. Each stage sees
// its micro-batches in order, each micro-batch the stages in order, so
// every KV row and every activation is what the whole batch would have
// given (a batch's bits do not depend on how it is cut: docs/design.md). Within
// a tick the workers' steps are sent first, then the primary's own stages
// run while they compute, then their answers are collected.
void Pipeline::run_pipelined(const Batch& batch, float* hidden, float* logits) {
  const std::vector<std::unique_ptr<Stage>>& stages = *running_;
  using Clock = std::chrono::steady_clock;
  const int n = batch.size(), width = config_.activation_width();
  const int k = (n + micro_batch_ - 1) / micro_batch_, S = static_cast<int>(stages.size());
  micro_.resize(k);
  std::vector<size_t> logits_before(k, 0);  // rows with logits in the micro-batches before each
  for (int j = 0; j < k; ++j) {
    Batch& m = micro_[j];
    m.clear();
    for (int t = j * micro_batch_; t < std::min(n, (j + 1) * micro_batch_); ++t)
      m.add(batch.tokens[t], batch.positions[t], batch.seq_ids[t], batch.logits[t] != 0);
    m.all_rows = batch.all_rows;
    if (j + 1 < k) logits_before[j + 1] = logits_before[j] + m.n_logits();
  }
  auto rows = [&](int j) { return hidden + static_cast<size_t>(j) * micro_batch_ * width; };
  // The last stage, when it runs the head: micro-batch j's logits after the earlier ones'.
  auto head_into = [&](int s, int j) {
    if (logits && s + 1 == S && micro_[j].n_logits() > 0)
      stages[s]->head_into(logits + logits_before[j] * config_.n_vocab);
  };
  std::vector<Clock::time_point> sent(S);
  std::vector<bool> pending(S, false);
  try {
    for (int t = 0; t < k + S - 1; ++t) {
      for (int s = 0; s < S; ++s) {
        const int j = t - s;
        if (j < 0 || j >= k || !stages[s]->computes_elsewhere()) continue;
        sent[s] = Clock::now();
        head_into(s, j);
        stages[s]->submit(micro_[j], rows(j));
        pending[s] = true;
      }
      for (int s = 0; s < S; ++s) {
        const int j = t - s;
        if (j < 0 || j >= k || stages[s]->computes_elsewhere()) continue;
        const auto t0 = Clock::now();
        head_into(s, j);
        stages[s]->forward(micro_[j], rows(j));
        add_stage_time(s, std::chrono::duration<double>(Clock::now() - t0).count(), false);
      }
      for (int s = 0; s < S; ++s) {
        if (!pending[s]) continue;
        pending[s] = false;
        stages[s]->collect();
        add_stage_time(s, std::chrono::duration<double>(Clock::now() - sent[s]).count(), false);
      }
    }
  } catch (...) {
    for (int s = 0; s < S; ++s)
      if (pending[s]) stages[s]->cancel();
    throw;
  }
}

void Pipeline::replace_stages(std::vector<std::unique_ptr<Stage>> stages) {
  check_coverage(stages, config_.n_layer);
  if (stages.size() > kMaxStages) fail("internal: more than {} stages", kMaxStages);
  std::lock_guard<std::mutex> lock(stages_mutex_);
  stages_ = std::move(stages);
  prompt_.reset();
  clear_stage_times();
}

void Pipeline::clear_stage_times() {
  for (size_t i = 0; i < kMaxStages; ++i) {
    stage_seconds_[i].store(0.0, std::memory_order_relaxed);
    decode_seconds_[i].store(0.0, std::memory_order_relaxed);
    decode_steps_[i].store(0, std::memory_order_relaxed);
  }
}

std::vector<StageSnapshot> Pipeline::snapshot() const {
  std::lock_guard<std::mutex> lock(stages_mutex_);
  std::vector<StageSnapshot> out;
  for (size_t i = 0; i < stages_.size(); ++i)
    out.push_back({stages_[i]->layer_begin(), stages_[i]->layer_end(), stages_[i]->devices(),
                   stage_seconds_[i].load(std::memory_order_relaxed), decode_seconds_[i].load(std::memory_order_relaxed),
                   decode_steps_[i].load(std::memory_order_relaxed)});
  return out;
}

void Pipeline::record(const Batch& batch) {
  for (int t = 0; t < batch.size(); ++t) {
    const auto seq = static_cast<size_t>(batch.seq_ids[t]);
    if (seq >= held_.size()) held_.resize(seq + 1);
    std::vector<int32_t>& h = held_[seq];
    const auto pos = static_cast<size_t>(batch.positions[t]);
    // Writing at a position ends the sequence there (what came after it was
    // cut before); a gap reads as unknown, which a replay refuses.
    h.resize(pos, kUnknownToken);
    h.push_back(batch.tokens[t]);
  }
}

std::span<const int32_t> Pipeline::held(int seq) const {
  if (seq < 0 || static_cast<size_t>(seq) >= held_.size()) return {};
  return held_[static_cast<size_t>(seq)];
}

void Pipeline::forget_after(int seq, int n_pos) {
  if (seq >= 0 && static_cast<size_t>(seq) < held_.size() && held_[seq].size() > static_cast<size_t>(n_pos))
    held_[seq].resize(static_cast<size_t>(std::max(0, n_pos)));
}

void Pipeline::truncate_sequence(int seq, int n_pos) {
  // The record first: a stage that fails to cut leaves what it holds unknown
  // to the caller, never believed held.
  forget_after(seq, n_pos);
  if (prompt_) {
    try {
      prompt_->truncate(seq, n_pos);
    } catch (const PromptStagesFailed& e) {
      lose_prompt_stages(e);
    }
  }
  for (auto& s : stages_) s->truncate_sequence(seq, n_pos);
}

int Pipeline::replay(const KeepPositions& keep) {
  int replayed = 0;
  for (size_t seq = 0; seq < held_.size(); ++seq) {
    const int kept = std::max(0, keep(static_cast<int>(seq)));
    if (held_[seq].size() > static_cast<size_t>(kept)) held_[seq].resize(static_cast<size_t>(kept));
    replayed += forward_again(static_cast<int>(seq));
  }
  return replayed;
}

}  // namespace shoal
