#include "engine/sequence_decoder.h"

#include <algorithm>
#include <limits>

#include "util/error.h"

namespace shoal {

size_t reusable_prefix(std::span<const TokenId> cached, std::span<const TokenId> prompt, int max_rollback) {
  size_t n = 0;
  while (n < cached.size() && n + 1 < prompt.size() && cached[n] == prompt[n]) ++n;
  return cached.size() - n > static_cast<size_t>(max_rollback) ? 0 : n;
}

SequenceDecoder::SequenceDecoder(const Tokenizer& tokenizer, int n_vocab, int n_ctx, const GenerationOptions& options,
                                 std::span<const TokenId> prompt)
    : tokenizer_(tokenizer),
      options_(options),
      n_vocab_(n_vocab),
      n_ctx_(n_ctx),
      n_prompt_(static_cast<int>(prompt.size())),
      sampler_(options.sampling, n_vocab),
      stops_(options.stop, options.min_indent) {
  if (options.grammar) grammar_.emplace(options.grammar);
  // The history never outgrows the context (plus the token that filled it),
  // so steps do not reallocate it.
  size_t most = static_cast<size_t>(n_ctx) + 1;
  if (options.max_tokens >= 0) most = std::min(most, prompt.size() + static_cast<size_t>(options.max_tokens) + 1);
  history_.reserve(std::max(most, prompt.size()));
  history_.assign(prompt.begin(), prompt.end());
}

bool SequenceDecoder::step(const float* logits) { return verify(logits, {}); }

bool SequenceDecoder::verify(const float* rows, std::span<const TokenId> draft) {
  text_.clear();
  accepted_ = 0;
  for (size_t i = 0;; ++i) {
    const int before = n_generated();
    const bool more = advance(rows + i * static_cast<size_t>(n_vocab_));
    const bool guessed = i < draft.size() && n_generated() > before && last() == draft[i];
    if (guessed) ++accepted_;
    if (!more || !guessed) {
      if (!draft.empty())
        draft_window_ = accepted_ == static_cast<int>(draft.size()) ? std::min(2 * draft_window_, kMaxDraftWindow)
                                                                    : accepted_ + 1;
      return more;
    }
  }
}

DraftJob SequenceDecoder::draft_job(int seq, const SpeculativeOptions& defaults, int cap,
                                    std::vector<TokenId>& out) const {
  int room = options_.draft_max >= 0 ? std::min(options_.draft_max, defaults.draft_max) : defaults.draft_max;
  room = std::min({room, cap, draft_window_, n_ctx_ - 1 - position()});
  if (options_.max_tokens >= 0) room = std::min(room, options_.max_tokens - n_generated() - 1);
  DraftJob job;
  job.seq = seq;
  job.history = history_;
  job.max = std::max(room, 0);
  job.min = options_.draft_min >= 0 ? options_.draft_min : defaults.draft_min;
  job.p_min = options_.draft_p_min >= 0 ? options_.draft_p_min : defaults.draft_p_min;
  job.out = &out;
  return job;
}

bool SequenceDecoder::advance(const float* logits) {
  if (finished()) return false;
  const bool limited = options_.max_tokens >= 0;
  if (limited && n_generated() >= options_.max_tokens) {  // max_tokens 0
    finish_reason_ = "length";
    return false;
  }
  if (grammar_ && grammar_->finished()) {  // nothing may follow: as if the end token came
    finish_reason_ = "stop";
    return false;
  }
  if (options_.on_logits) options_.on_logits(logits, n_vocab_);
  const TokenId token = sample(logits);
  if (!options_.ignore_eos && tokenizer_.is_end_of_generation(token)) {
    finish_reason_ = "stop";
    return false;
  }
  if (options_.logprobs >= 0 && options_.on_logprob)
    options_.on_logprob(token_logprob(logits, n_vocab_, token, options_.logprobs));
  history_.push_back(token);
  const bool shown = std::find(options_.shown_tokens.begin(), options_.shown_tokens.end(), token) !=
                     options_.shown_tokens.end();
  const std::string piece = tokenizer_.token_to_piece(token, shown);
  if (n_generated() == 1) first_token_at_ = std::chrono::steady_clock::now();
  text_ += stops_.push(utf8_.push(piece));
  if (stops_.stopped()) {
    finish_reason_ = stops_.stopped_by_indent() ? "length" : "stop";
  } else if (options_.max_predict_ms > 0 && piece.find('\n') != std::string::npos &&
             std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - first_token_at_).count() >
                 options_.max_predict_ms) {
    finish_reason_ = "length";
  } else if (limited && n_generated() >= options_.max_tokens) {
    // Decided now rather than before the next sample, so the last token is
    // not fed for nothing.
    finish_reason_ = "length";
  } else if (position() >= n_ctx_) {  // no room for its KV: the context is full
    finish_reason_ = "length";
  }
  return !finished();
}

// With a grammar, the plain draw is taken when the grammar allows it (most
// steps: one check of one token); only a refused draw pays for the mask over
// the vocabulary and draws again from what is left, as llama.cpp does. For
// greedy decoding that is exactly the best allowed token.
TokenId SequenceDecoder::sample(const float* logits) {
  const TokenId first = sampler_.sample(logits, history_);
  if (!grammar_ || grammar_takes(first)) return first;
  allowed_.assign(static_cast<size_t>(n_vocab_), 0);
  grammar_->allowed_tokens(tokenizer_.piece_trie(), allowed_);
  const bool may_end = grammar_->accepting();
  for (TokenId id : tokenizer_.vocab().eog_ids()) allowed_[static_cast<size_t>(id)] = may_end ? 1 : 0;
  masked_.assign(logits, logits + n_vocab_);
  bool any = false;
  for (size_t i = 0; i < masked_.size(); ++i) {
    if (!allowed_[i]) masked_[i] = -std::numeric_limits<float>::infinity();
    any = any || allowed_[i];
  }
  if (!any) fail("the grammar allows no token of this vocabulary after {} generated tokens", n_generated());
  const TokenId token = sampler_.sample(masked_.data(), history_);
  if (!grammar_takes(token)) fail("internal: the grammar refused token {} it had allowed", token);
  return token;
}

// The same rule the mask follows: an end token where the text is a whole
// match; any other token by its text (a token with none, a control token,
// never — the piece trie leaves those out).
bool SequenceDecoder::grammar_takes(TokenId token) {
  if (tokenizer_.is_end_of_generation(token)) return grammar_->accepting();
  const std::string piece = tokenizer_.token_to_piece(token);
  return !piece.empty() && grammar_->accept(piece);
}

std::string SequenceDecoder::flush() {
  std::string tail = stops_.push(utf8_.flush());
  tail += stops_.flush();
  return tail;
}

}  // namespace shoal
