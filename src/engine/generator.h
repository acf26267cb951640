#pragma once
// Prompt in, text out, for one sequence: prefill in chunks, then sample one
// token a step until an end-of-generation token, a stop string, the token
// limit or the context end.
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/drafter.h"
#include "engine/pipeline.h"
#include "grammar/grammar.h"
#include "engine/pooling.h"
#include "engine/sampler.h"
#include "engine/token_logprob.h"
#include "tokenizer/tokenizer.h"

namespace shoal {

struct GenerationOptions {
  int max_tokens = 128;  // < 0: until the context is full
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings (not shown in the output)
  bool ignore_eos = false;
  // llama-server's code-completion limits (/infill): after the first line,
  // a line indented by fewer than min_indent spaces or tabs ends the text
  // before that line's first character; past max_predict_ms since the first
  // generated token, a token that writes a newline ends it. Both end with
  // finish "length" (llama-server's stop_type "limit"); 0: off.
  int min_indent = 0;
  double max_predict_ms = 0;
  // Sees the logits ([n_vocab]) each token is sampled from (tests, tools).
  std::function<void(const float* logits, int n_vocab)> on_logits;
  // With logprobs >= 0, on_logprob gets each generated token's log-probability
  // and its `logprobs` most likely alternatives (the end token excluded),
  // before the token's text reaches on_text.
  int logprobs = -1;
  std::function<void(const TokenLogprob&)> on_logprob;
  // Set: every generated token keeps the text inside this grammar (JSON
  // schemas, tool calls, GBNF); the end token only where the text is a whole
  // match, and a match nothing may follow ends generation ("stop").
  std::shared_ptr<const grammar::Grammar> grammar;
  // Control tokens written into the text all the same (a tool-call family's
  // markers, which would be hidden otherwise).
  std::vector<TokenId> shown_tokens;
  // Speculative decoding (with a drafter), per request: at most draft_max
  // guessed tokens a step (0: none for this request), fewer than draft_min
  // none, a draft model stopping below draft_p_min; < 0: the engine's flags.
  int draft_max = -1;
  int draft_min = -1;
  float draft_p_min = -1.0f;
  // Not None: an embedding request. The prompt is read, nothing generated,
  // and RequestResult::embedding holds the pooled, L2-normalised vector.
  Pooling pooling = Pooling::None;
};

struct GenerationResult {
  std::vector<TokenId> tokens;  // generated tokens, the end token excluded
  std::string finish_reason;    // "stop" (end token or stop string) or "length"
  int n_prompt = 0;
  int n_reused = 0;             // prompt tokens whose KV cache was reused
  double prompt_seconds = 0.0;
  double generation_seconds = 0.0;
  int drafted = 0;   // speculative guesses verified
  int accepted = 0;  // of which right
};


class Generator {
 public:
  Generator(Pipeline& pipeline, const Tokenizer& tokenizer, int n_ctx, int seq = 0);

  // Feeds tokens at positions start_pos.. in chunks of at most the
  // pipeline's batch; returns the logits after the last one ([n_vocab]).
  const float* feed(std::span<const TokenId> tokens, int start_pos);

  // With a recovery (shoal run and chat on a cluster): when a step fails, it
  // is called with the cause and what to keep (this generator's sequence),
  // and must leave the pipeline with new stages holding it again
  // (Engine::rebuild_stages); the step then runs again, so the text goes on
  // as if nothing happened (the same bits). Without one, or when it throws
  // or returns false, the failure is the caller's.
  using Recovery = std::function<bool(const std::exception& cause, const Pipeline::KeepPositions& keep)>;
  void set_recovery(Recovery recover) { recover_ = std::move(recover); }
  // Speculative decoding: guesses from `drafter` as `options` say (a
  // request's GenerationOptions::draft_* override them).
  void set_drafter(Drafter* drafter, const SpeculativeOptions& options) {
    drafter_ = drafter;
    speculative_ = options;
  }

  // Generates a continuation of the prompt. The KV cache of the longest
  // prefix shared with what the sequence already holds is reused (a chat
  // that goes on re-reads only its new turn). on_text receives released
  // text as it streams (valid UTF-8); returning false stops generation.
  GenerationResult generate(std::span<const TokenId> prompt, const GenerationOptions& options,
                            const std::function<bool(const std::string&)>& on_text);

 private:
  Pipeline& pipeline_;
  const Tokenizer& tokenizer_;
  int n_ctx_;
  int seq_;
  Batch batch_;
  Recovery recover_;
  Drafter* drafter_ = nullptr;
  SpeculativeOptions speculative_;
  std::vector<TokenId> fed_, draft_;  // a verification step's tokens: the last one, then the guess
  // One pass of feed() over the chunks; throws what the pipeline throws.
  // all_logits: every row's logits (a verification step, one chunk).
  const float* feed_chunks(std::span<const TokenId> tokens, int start_pos, bool all_logits);
  const float* feed(std::span<const TokenId> tokens, int start_pos, bool all_logits);
};

}  // namespace shoal
