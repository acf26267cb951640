#include "engine/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "util/error.h"

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

Pipeline::Pipeline(const ModelConfig& config, const ModelWeights& weights, CpuBackend& head_backend,
                   std::vector<std::unique_ptr<Stage>> stages, int max_tokens, int micro_batch)
    : config_(config),
      weights_(weights),
      head_(head_backend),
      stages_(std::move(stages)),
      max_tokens_(max_tokens),
      micro_batch_(micro_batch),
      hidden_(static_cast<size_t>(max_tokens) * config.n_embd * sizeof(float)),
      gathered_(static_cast<size_t>(max_tokens) * config.n_embd * sizeof(float)),
      logits_(std::make_unique<HostBuffer>(static_cast<size_t>(config.n_vocab) * sizeof(float))) {
  check_coverage(stages_, config.n_layer);
  stage_seconds_ = std::make_unique<std::atomic<double>[]>(kMaxStages);
  decode_seconds_ = std::make_unique<std::atomic<double>[]>(kMaxStages);
  decode_steps_ = std::make_unique<std::atomic<uint64_t>[]>(kMaxStages);
  clear_stage_times();
  if (stages_.size() > kMaxStages) fail("internal: more than {} stages", kMaxStages);
}

const float* Pipeline::forward(const Batch& batch) {
  const int n = batch.size();
  if (n == 0) fail("empty batch");
  if (n > max_tokens_) fail("batch of {} tokens exceeds the maximum of {}", n, max_tokens_);
  const DevicePtr hidden{&hidden_, 0}, gathered{&gathered_, 0};
  float* hidden_host = CpuBackend::floats(hidden);
  head_.get_rows(weights_.token_embd, batch.tokens.data(), n, hidden);
  if (config_.embd_scale != 1.0f) head_.scale(hidden, config_.embd_scale, static_cast<int64_t>(n) * config_.n_embd);
  run_stages(batch, hidden_host);

  // Only rows that need logits go through the head: the vocabulary matmul
  // is the largest of the step.
  const int width = config_.n_embd;
  int m = 0;
  for (int t = 0; t < n; ++t)
    if (batch.logits[t])
      std::memcpy(CpuBackend::floats(gathered + static_cast<int64_t>(m++) * width), hidden_host + t * width,
                  width * sizeof(float));
  const size_t logit_bytes = static_cast<size_t>(m) * config_.n_vocab * sizeof(float);
  // Grows only when more rows than ever before want logits (teacher forcing).
  if (logits_->bytes() < logit_bytes) logits_ = std::make_unique<HostBuffer>(logit_bytes);
  const DevicePtr logits{logits_.get(), 0};
  if (m == 0) return CpuBackend::floats(logits);
  head_.rmsnorm(gathered, weights_.output_norm, gathered, m, width, config_.norm_eps);
  head_.matmul(weights_.output, gathered, logits, m);
  if (config_.logit_softcap > 0.0f) head_.softcap(logits, config_.logit_softcap, static_cast<int64_t>(m) * config_.n_vocab);
  return CpuBackend::floats(logits);
}

void Pipeline::add_stage_time(size_t i, double dt, bool decode) {
  stage_seconds_[i].store(stage_seconds_[i].load(std::memory_order_relaxed) + dt, std::memory_order_relaxed);
  if (decode) {
    decode_seconds_[i].store(decode_seconds_[i].load(std::memory_order_relaxed) + dt, std::memory_order_relaxed);
    decode_steps_[i].store(decode_steps_[i].load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
}

void Pipeline::run_stages(const Batch& batch, float* hidden) {
  const int n = batch.size();
  const bool overlap = std::any_of(stages_.begin(), stages_.end(), [](auto& s) { return s->computes_elsewhere(); });
  if (micro_batch_ > 0 && n >= 2 * micro_batch_ && stages_.size() >= 2 && overlap) return run_pipelined(batch, hidden);
  for (size_t i = 0; i < stages_.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    stages_[i]->forward(batch, hidden);
    add_stage_time(i, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), n == 1);
  }
}

// A wavefront: at tick t, stage s runs micro-batch t - s. Each stage sees
// its micro-batches in order, each micro-batch the stages in order, so
// every KV row and every activation is what the whole batch would have
// given (a batch's bits do not depend on how it is cut: DESIGN.md). Within
// a tick the workers' steps are sent first, then the primary's own stages
// run while they compute, then their answers are collected.
void Pipeline::run_pipelined(const Batch& batch, float* hidden) {
  using Clock = std::chrono::steady_clock;
  const int n = batch.size(), width = config_.n_embd;
  const int k = (n + micro_batch_ - 1) / micro_batch_, S = static_cast<int>(stages_.size());
  micro_.resize(k);
  for (int j = 0; j < k; ++j) {
    Batch& m = micro_[j];
    m.clear();
    for (int t = j * micro_batch_; t < std::min(n, (j + 1) * micro_batch_); ++t)
      m.add(batch.tokens[t], batch.positions[t], batch.seq_ids[t], batch.logits[t] != 0);
  }
  auto rows = [&](int j) { return hidden + static_cast<size_t>(j) * micro_batch_ * width; };
  std::vector<Clock::time_point> sent(S);
  std::vector<bool> pending(S, false);
  try {
    for (int t = 0; t < k + S - 1; ++t) {
      for (int s = 0; s < S; ++s) {
        const int j = t - s;
        if (j < 0 || j >= k || !stages_[s]->computes_elsewhere()) continue;
        sent[s] = Clock::now();
        stages_[s]->submit(micro_[j], rows(j));
        pending[s] = true;
      }
      for (int s = 0; s < S; ++s) {
        const int j = t - s;
        if (j < 0 || j >= k || stages_[s]->computes_elsewhere()) continue;
        const auto t0 = Clock::now();
        stages_[s]->forward(micro_[j], rows(j));
        add_stage_time(s, std::chrono::duration<double>(Clock::now() - t0).count(), false);
      }
      for (int s = 0; s < S; ++s) {
        if (!pending[s]) continue;
        pending[s] = false;
        stages_[s]->collect();
        add_stage_time(s, std::chrono::duration<double>(Clock::now() - sent[s]).count(), false);
      }
    }
  } catch (...) {
    for (int s = 0; s < S; ++s)
      if (pending[s]) stages_[s]->cancel();
    throw;
  }
}

void Pipeline::replace_stages(std::vector<std::unique_ptr<Stage>> stages) {
  check_coverage(stages, config_.n_layer);
  if (stages.size() > kMaxStages) fail("internal: more than {} stages", kMaxStages);
  std::lock_guard<std::mutex> lock(stages_mutex_);
  stages_ = std::move(stages);
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

void Pipeline::truncate_sequence(int seq, int n_pos) {
  for (auto& s : stages_) s->truncate_sequence(seq, n_pos);
}

void Pipeline::copy_sequence(int src, int dst, int n_pos) {
  for (auto& s : stages_) s->copy_sequence(src, dst, n_pos);
}

}  // namespace shoal
