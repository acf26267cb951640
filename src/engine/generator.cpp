#include "engine/generator.h"

#include <algorithm>
#include <chrono>
#include <climits>

#include "engine/sequence_decoder.h"
#include "util/error.h"
#include "util/log.h"

namespace shoal {
namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

Generator::Generator(Pipeline& pipeline, const Tokenizer& tokenizer, int n_ctx, int seq)
    : pipeline_(pipeline), tokenizer_(tokenizer), n_ctx_(n_ctx), seq_(seq) {}

const float* Generator::feed_chunks(std::span<const TokenId> tokens, int start_pos, bool all_logits) {
  const float* logits = nullptr;
  const size_t chunk = static_cast<size_t>(pipeline_.max_tokens());
  for (size_t i = 0; i < tokens.size(); i += chunk) {
    const size_t n = std::min(chunk, tokens.size() - i);
    batch_.clear();
    for (size_t j = 0; j < n; ++j)
      batch_.add(tokens[i + j], start_pos + static_cast<int>(i + j), seq_, all_logits || i + j + 1 == tokens.size());
    // A drafter that reads the model's hidden state sees every row (Drafter::see).
    batch_.all_rows = drafter_ && drafter_->reads_hidden_rows();
    logits = pipeline_.forward(batch_);
    if (batch_.all_rows) drafter_->see(batch_, pipeline_.normed_rows());
  }
  return logits;
}

const float* Generator::feed(std::span<const TokenId> tokens, int start_pos) { return feed(tokens, start_pos, false); }

const float* Generator::feed(std::span<const TokenId> tokens, int start_pos, bool all_logits) {
  if (tokens.empty()) fail("nothing to feed");
  const float* logits = nullptr;
  try {
    // A lost worker or a frame that failed its integrity check: new stages,
    // this sequence replayed into them, and the step again (a few times at
    // most: a worker may go during the replay too).
    for (int attempt = 0;; ++attempt) {
      try {
        logits = feed_chunks(tokens, start_pos, all_logits);
        break;
      } catch (const std::exception& e) {
        if (!recover_ || attempt >= 8) throw;
        spdlog::warn("a stage failed ({}); re-planning and replaying {} tokens", e.what(),
                     pipeline_.held(seq_).size());
        if (!recover_(e, [this](int seq) { return seq == seq_ ? INT_MAX : 0; })) throw;
      }
    }
  } catch (...) {
    // What the stages hold is in doubt now: the next prompt starts from
    // nothing.
    try {
      pipeline_.truncate_sequence(seq_, 0);
    } catch (...) {
      // A stage that cannot even truncate has failed already: the first error is the one to report.
    }
    throw;
  }
  return logits;
}

GenerationResult Generator::generate(std::span<const TokenId> prompt, const GenerationOptions& options,
                                     const std::function<bool(const std::string&)>& on_text) {
  GenerationResult result;
  result.n_prompt = static_cast<int>(prompt.size());
  if (prompt.empty()) fail("the prompt is empty (no tokens)");
  if (static_cast<int>(prompt.size()) >= n_ctx_)
    fail("the prompt has {} tokens, the context only {}", prompt.size(), n_ctx_);

  const size_t reuse = reusable_prefix(pipeline_.held(seq_), prompt, pipeline_.max_rollback());
  pipeline_.truncate_sequence(seq_, static_cast<int>(reuse));
  result.n_reused = static_cast<int>(reuse);
  auto t0 = std::chrono::steady_clock::now();
  const float* logits = feed(prompt.subspan(reuse), static_cast<int>(reuse));
  result.prompt_seconds = seconds_since(t0);

  SequenceDecoder decoder(tokenizer_, pipeline_.config().n_vocab, n_ctx_, options, prompt);
  auto t1 = std::chrono::steady_clock::now();
  bool keep_going = true;
  bool more = decoder.step(logits);
  for (;;) {
    if (!decoder.text().empty() && on_text) keep_going = on_text(decoder.text());
    if (!more || !keep_going) break;
    draft_.clear();
    DraftJob job = decoder.draft_job(seq_, speculative_, INT_MAX, draft_);
    if (drafter_ && job.max > 0) drafter_->propose(std::span<DraftJob>(&job, 1));
    // The last token and the guess behind it (if any), every row with logits.
    fed_.assign(1, decoder.last());
    fed_.insert(fed_.end(), draft_.begin(), draft_.end());
    more = decoder.verify(feed(fed_, decoder.position(), true), draft_);
    pipeline_.forget_after(seq_, decoder.position());  // the rows behind a wrong guess
    result.drafted += static_cast<int>(draft_.size());
    result.accepted += decoder.accepted();
  }
  std::string tail = decoder.flush();
  if (!tail.empty() && on_text && keep_going) on_text(tail);
  result.tokens.assign(decoder.generated().begin(), decoder.generated().end());
  // A caller that stopped us (on_text false) gets "length", as before.
  result.finish_reason = decoder.finished() ? decoder.finish_reason() : "length";
  result.generation_seconds = seconds_since(t1);
  return result;
}

}  // namespace shoal
