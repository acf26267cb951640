#include "engine/mtp_drafter.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/engine.h"
#include "engine/output_head.h"
#include "util/error.h"

namespace shoal {
namespace {

// The block's own embedding or head where the file keeps one (DeepSeek V3's
// converter may), else empty: the model's are shared.
Matrix own_matrix(const gguf::File& file, const ModelConfig& c, const char* name, int block) {
  const gguf::TensorInfo* t = file.find_tensor(fmt::format("blk.{}.nextn.{}.weight", block, name));
  if (!t) return {};
  if (t->shape.size() != 2 || t->shape[0] != c.n_embd || t->shape[1] != c.n_vocab)
    fail("{}: tensor '{}' is not [{}, {}] (the embedding's shape)", file.path(), t->name, c.n_embd, c.n_vocab);
  return Matrix{t->type, t->data, t->shape[1], t->shape[0]};
}

}  // namespace

MtpDrafter::MtpDrafter(const SpeculativeOptions& options, Engine& target)
    : options_(options),
      backend_(target.head_backend()),
      target_weights_(target.weights()),
      config_(target.config()),
      max_tokens_(target.n_batch()),
      n_ctx_(target.n_ctx()) {
  const gguf::File& file = target.file();
  const int block = config_.n_layer;  // the first nextn block (llama.cpp drafts with one)
  if (config_.n_nextn < 1) fail("internal: {} has no multi-token-prediction layer", file.path());  // Engine checked
  if (!file.find_tensor(config_.tensor_name(TensorKind::NextnEhProj, block)))
    fail("{}: block {} is a multi-token-prediction layer without nextn.eh_proj: --spec-type mtp cannot run it",
         file.path(), block);
  // The block is one more attention layer of the model's own kind, at the
  // rope of its last attention layer, holding its nextn tensors too. Only
  // the block runs here: every layer reads as attention.
  LayerSettings settings = config_.layers.back();
  for (const LayerSettings& l : config_.layers)
    if (l.kind == LayerKind::Attention) settings = l;
  for (LayerSettings& l : config_.layers) l.kind = LayerKind::Attention;
  config_.layers.push_back(settings);
  config_.n_layer = block + 1;
  config_.recurrent_tensors.clear();
  for (TensorKind k : {TensorKind::NextnEhProj, TensorKind::NextnEnorm, TensorKind::NextnHnorm})
    config_.layer_tensors.push_back(k);
  const bool own_norm = file.find_tensor(config_.tensor_name(TensorKind::NextnSharedHeadNorm, block)) != nullptr;
  if (own_norm) config_.layer_tensors.push_back(TensorKind::NextnSharedHeadNorm);
  const BindRange range{block, block + 1, false};
  weights_ = bind_weights(file, config_, range);
  prepare_weights(backend_, weights_, config_, range);
  own_embd_ = own_matrix(file, config_, "embed_tokens", block);
  own_head_ = own_matrix(file, config_, "shared_head_head", block);
  std::vector<WeightToPrepare> own;
  if (!own_embd_.empty()) own.push_back({&own_embd_, 0, true});
  if (!own_head_.empty()) own.push_back({&own_head_, 0});
  if (!own.empty()) backend_.prepare_weights(own, weights_.owned);
  head_norm_ = own_norm ? weights_.layers[block][TensorKind::NextnSharedHeadNorm] : target_weights_.output_norm;

  const EngineOptions& eo = target.options();
  stage_ = std::make_unique<LocalStage>(backend_, config_, weights_, block, block + 1, eo.n_seq, n_ctx_, max_tokens_,
                                        eo.kv_types);
  const int64_t width = config_.n_embd, rows = max_tokens_;
  buffer_ = backend_.allocate(static_cast<size_t>(5 * rows * width) * sizeof(float));
  embd_ = {buffer_.get(), 0};
  hidden_ = embd_ + rows * width;
  pair_ = hidden_ + rows * width;  // two rows wide
  rows_ = pair_ + 2 * rows * width;
  zeros_.assign(static_cast<size_t>(width), 0.0f);
  seen_.resize(static_cast<size_t>(eo.n_seq));
}

MtpDrafter::~MtpDrafter() = default;

std::string MtpDrafter::describe() const {
  return fmt::format("the model's multi-token-prediction layer {} ({}), up to {} tokens, p >= {}", config_.n_layer - 1,
                     stage_->describe(), options_.draft_max, options_.draft_p_min);
}

const float* MtpDrafter::step(const Batch& batch, const float* hidden) {
  const int n = batch.size(), width = config_.n_embd, n_vocab = config_.n_vocab, block = config_.n_layer - 1;
  if (n == 0 || n > max_tokens_) fail("internal: an MTP step of {} rows (at most {})", n, max_tokens_);
  const LayerWeights& w = weights_.layers[block];
  const int m = batch.n_logits();
  if (m > 0 && (!logits_buffer_ || logits_buffer_->bytes() < static_cast<size_t>(m) * n_vocab * sizeof(float)))
    logits_buffer_ = backend_.allocate(static_cast<size_t>(m) * n_vocab * sizeof(float));
  const DevicePtr logits{logits_buffer_.get(), 0};
  const float eps = config_.norm_eps;
  backend_.begin_step(batch.seq_ids.data(), batch.positions.data(), n);
  try {
    // [enorm(embedding); hnorm(hidden)] through eh_proj: the block's input row.
    backend_.get_rows(own_embd_.empty() ? target_weights_.token_embd : own_embd_, batch.tokens.data(), n, embd_);
    backend_.upload(hidden_, hidden, static_cast<size_t>(n) * width * sizeof(float));
    backend_.rmsnorm(embd_, w[TensorKind::NextnEnorm], embd_, n, width, eps);
    backend_.rmsnorm(hidden_, w[TensorKind::NextnHnorm], hidden_, n, width, eps);
    backend_.copy_rows(pair_, 2 * width, embd_, width, width, n);
    backend_.copy_rows(pair_ + width, 2 * width, hidden_, width, width, n);
    backend_.matmul(w[TensorKind::NextnEhProj], pair_, rows_, n);
    stage_->forward_on_device(batch, rows_);
    if (m > 0) {
      // The rows with logits to the front, normed (the next step's hidden
      // state) and through the shared head.
      gather_logit_rows(backend_, batch, rows_, width);
      backend_.rmsnorm(rows_, head_norm_, rows_, m, width, eps);
      out_rows_.resize(static_cast<size_t>(m) * width);
      backend_.download(out_rows_.data(), rows_, out_rows_.size() * sizeof(float));
      project_to_vocabulary(backend_, own_head_.empty() ? target_weights_.output : own_head_, config_, rows_, logits, m);
      logits_host_.resize(static_cast<size_t>(m) * n_vocab);
      backend_.download(logits_host_.data(), logits, logits_host_.size() * sizeof(float));
    }
    backend_.finish_step();
  } catch (...) {
    backend_.abandon_step();
    throw;
  }
  return logits_host_.data();
}

const float* MtpDrafter::hidden_at(int seq, int pos, std::span<const TokenId> history) const {
  if (pos < 0) return zeros_.data();  // the first position has no row before it: zeros, as llama.cpp's
  if (seq < 0 || static_cast<size_t>(seq) >= seen_.size()) return nullptr;
  const Seen& s = seen_[static_cast<size_t>(seq)];
  const int at = pos - s.begin;
  if (at < 0 || at >= static_cast<int>(s.tokens.size())) return nullptr;
  if (static_cast<size_t>(pos) < history.size() && s.tokens[static_cast<size_t>(at)] != history[static_cast<size_t>(pos)])
    return nullptr;
  return s.rows.data() + static_cast<size_t>(at) * config_.n_embd;
}

void MtpDrafter::observe(const Batch& batch, const float* normed_rows) {
  const int n = batch.size();
  const size_t width = static_cast<size_t>(config_.n_embd);
  batch_.clear();
  batch_hidden_.resize(static_cast<size_t>(n) * width);
  for (int t = 0; t < n; ++t) {
    const int seq = batch.seq_ids[t], pos = batch.positions[t];
    // The row before in this batch, or what the last forward showed of the
    // sequence (the row that chose this token); unknown (a slot whose
    // prefix a new request reused): zeros, a worse guess, never a wrong token.
    const float* before = nullptr;
    if (t > 0 && batch.seq_ids[t - 1] == seq && batch.positions[t - 1] == pos - 1)
      before = normed_rows + static_cast<size_t>(t - 1) * width;
    else
      before = hidden_at(seq, pos - 1, {});
    std::copy_n(before ? before : zeros_.data(), width, batch_hidden_.begin() + static_cast<ptrdiff_t>(t * width));
    batch_.add(batch.tokens[t], pos, seq, false);
  }
  step(batch_, batch_hidden_.data());
  // Keep each sequence's rows of this batch: its last token's hidden state
  // is where the next guess starts (the accepted one's, after a guess).
  std::vector<bool> fresh(seen_.size(), true);
  for (int t = 0; t < n; ++t) {
    const auto seq = static_cast<size_t>(batch.seq_ids[t]);
    if (seq >= seen_.size()) continue;
    Seen& s = seen_[seq];
    const int pos = batch.positions[t];
    if (fresh[seq] || pos != s.begin + static_cast<int>(s.tokens.size())) {
      s.begin = pos;
      s.tokens.clear();
      s.rows.clear();
      fresh[seq] = false;
    }
    s.tokens.push_back(batch.tokens[t]);
    s.rows.insert(s.rows.end(), normed_rows + static_cast<size_t>(t) * width,
                  normed_rows + static_cast<size_t>(t + 1) * width);
  }
  // Only the last rows are ever read (the next batch or guess starts at most
  // a checked guess, 65 rows, back): a prompt chunk's others go.
  for (Seen& s : seen_) {
    if (s.tokens.size() <= kKeptRows) continue;
    const size_t drop = s.tokens.size() - kKeptRows;
    s.tokens.erase(s.tokens.begin(), s.tokens.begin() + static_cast<ptrdiff_t>(drop));
    s.rows.erase(s.rows.begin(), s.rows.begin() + static_cast<ptrdiff_t>(drop * width));
    s.begin += static_cast<int>(drop);
  }
}

void MtpDrafter::forget_all() noexcept {
  for (Seen& s : seen_) s = Seen{};
}

void MtpDrafter::guess(std::span<DraftJob> jobs) {
  const size_t width = static_cast<size_t>(config_.n_embd);
  const int n_vocab = config_.n_vocab;
  // The first step: each sequence's last token at its position, with the
  // target's hidden state at the position before (the row that chose it).
  std::vector<DraftJob*> live;  // the jobs of this step's rows, in order
  batch_.clear();
  batch_hidden_.clear();
  for (DraftJob& job : jobs) {
    if (job.max <= 0 || job.history.empty()) continue;
    const int pos = static_cast<int>(job.history.size()) - 1;
    const float* before = hidden_at(job.seq, pos - 1, job.history);
    if (!before || pos >= n_ctx_) continue;
    batch_.add(job.history.back(), pos, job.seq, true);
    batch_hidden_.insert(batch_hidden_.end(), before, before + width);
    live.push_back(&job);
  }
  // Then from the block's own hidden state, one token a step.
  std::vector<float> next_hidden;
  while (batch_.size() > 0) {
    const float* logits = step(batch_, batch_hidden_.data());
    Batch next;
    next_hidden.clear();
    std::vector<DraftJob*> still;
    for (int r = 0; r < batch_.size(); ++r) {
      DraftJob& job = *live[static_cast<size_t>(r)];
      const auto [best, sure] = best_token(logits + static_cast<size_t>(r) * n_vocab, n_vocab, job.p_min);
      if (!sure) continue;
      job.out->push_back(best);
      const int pos = batch_.positions[r] + 1;
      if (static_cast<int>(job.out->size()) >= job.max || pos >= n_ctx_) continue;
      next.add(best, pos, job.seq, true);
      const float* own = out_rows_.data() + static_cast<size_t>(r) * width;
      next_hidden.insert(next_hidden.end(), own, own + width);
      still.push_back(&job);
    }
    batch_ = std::move(next);
    batch_hidden_.swap(next_hidden);
    live.swap(still);
  }
}

}  // namespace shoal
