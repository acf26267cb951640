#include "engine/pipeline.h"

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
                   std::vector<std::unique_ptr<Stage>> stages, int max_tokens)
    : config_(config),
      weights_(weights),
      head_(head_backend),
      stages_(std::move(stages)),
      max_tokens_(max_tokens),
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
  for (size_t i = 0; i < stages_.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    stages_[i]->forward(batch, hidden_host);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stage_seconds_[i].store(stage_seconds_[i].load(std::memory_order_relaxed) + dt, std::memory_order_relaxed);
    if (n == 1) {
      decode_seconds_[i].store(decode_seconds_[i].load(std::memory_order_relaxed) + dt, std::memory_order_relaxed);
      decode_steps_[i].store(decode_steps_[i].load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
  }

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
