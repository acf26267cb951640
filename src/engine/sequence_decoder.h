#pragma once
// What one sequence carries from token to token once its prompt is in:
// sampler, token history, UTF-8 and stop-string streams, and the rules that
// end generation. Generator (one sequence, its own loop) and Scheduler (many
// sequences in one batch) both drive it, so a request ends the same way and
// yields the same tokens whichever runs it.
#include <algorithm>
#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/drafter.h"
#include "engine/generator.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"
#include "grammar/grammar_matcher.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8_stream.h"

namespace shoal {

// How many leading prompt tokens can keep the KV a sequence already holds
// (`cached`): the common prefix, but never the whole prompt — the last prompt
// token must be fed again so its logits start the generation — and nothing
// when that would cut the sequence back by more than `max_rollback`
// positions (a sliding-window layer has overwritten them; KvCache).
size_t reusable_prefix(std::span<const TokenId> cached, std::span<const TokenId> prompt, int max_rollback);

class SequenceDecoder {
 public:
  // n_ctx: the sequence's context; prompt: every token before the first one
  // generated (kept for the penalties and to know positions). `options`
  // is kept by reference and must outlive the decoder.
  SequenceDecoder(const Tokenizer& tokenizer, int n_vocab, int n_ctx, const GenerationOptions& options,
                  std::span<const TokenId> prompt);

  // Takes the logits ([n_vocab]) after the last fed token, samples the next
  // token and streams its text. Returns true while generation goes on: then
  // last() must be fed at position() and its logits given to the next step.
  // Returns false when it ended (finish_reason() says why). Either way
  // text() holds the text this step released (maybe empty).
  bool step(const float* logits);
  // Speculative decoding: the logits after last() and after each token of
  // `draft` fed behind it ([1 + draft.size()][n_vocab]); step() is verify()
  // without a guess. Samples from the first row, and while the token drawn
  // equals the next guess, from the row after it: every token is the one plain
  // decoding would draw (with the same sampler state), so the guesses change
  // how many tokens a step yields, never which. text() holds all the text
  // released; accepted() how many guesses were right. The rows past
  // position() are stale then (the guesses after a wrong one).
  bool verify(const float* rows, std::span<const TokenId> draft);
  int accepted() const { return accepted_; }
  // The sequence's next guess to ask for: at most the request's
  // draft_max or the engine's (`defaults`), `cap` and the draft window, and
  // no further than the context and the token limit allow (a step yields
  // one token more than it guesses right); max 0: none. min and p_min the
  // request's or the engine's.
  DraftJob draft_job(int seq, const SpeculativeOptions& defaults, int cap, std::vector<TokenId>& out) const;
  // At the end: the text still held back (an incomplete character as
  // U+FFFD, a partial stop-string match that turned out not to be one).
  std::string flush();

  const std::string& text() const { return text_; }
  TokenId last() const { return history_.back(); }
  int position() const { return static_cast<int>(history_.size()) - 1; }  // where last() goes
  std::span<const TokenId> generated() const {
    return std::span<const TokenId>(history_).subspan(static_cast<size_t>(n_prompt_));
  }
  std::span<const TokenId> history() const { return history_; }  // prompt + generated
  int n_generated() const { return static_cast<int>(history_.size()) - n_prompt_; }
  bool finished() const { return finish_reason_ != nullptr; }
  // "stop" (end-of-generation token or stop string) or "length" (token
  // limit or context end); nullptr while running.
  const char* finish_reason() const { return finish_reason_; }
  // The stop string that ended the sequence; empty when something else did.
  const std::string& stop_string() const { return stops_.matched(); }

 private:
  // step() without clearing text(): its text is appended.
  bool advance(const float* logits);
  // The sampler's draw, or with a grammar the draw among what it allows.
  TokenId sample(const float* logits);
  // Whether the grammar allows `token` next; takes it if so.
  bool grammar_takes(TokenId token);

  const Tokenizer& tokenizer_;
  const GenerationOptions& options_;
  int n_vocab_;
  int n_ctx_;
  int n_prompt_;
  Sampler sampler_;
  StopMatcher stops_;
  // With options.grammar: where the text stands in it, and buffers for a
  // draw the grammar refused (the logits with what it forbids at -inf).
  std::optional<grammar::GrammarMatcher> grammar_;
  std::vector<float> masked_;
  std::vector<uint8_t> allowed_;
  Utf8Stream utf8_;
  std::vector<TokenId> history_;  // prompt + generated
  std::string text_;
  std::chrono::steady_clock::time_point first_token_at_;  // for options.max_predict_ms
  const char* finish_reason_ = nullptr;
  int accepted_ = 0;
  // The draft window: a guess that was right throughout doubles it, a wrong
  // one sets it to one more than was right. A long quote is then taken in
  // long guesses, while free text, where guesses fail early, costs short
  // ones (on a CPU, rows past the matmul's tile of four are not free).
  int draft_window_ = 4;
  static constexpr int kMaxDraftWindow = 64;  // --draft-max's limit
};

}  // namespace shoal
