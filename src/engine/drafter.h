#pragma once
// Speculative decoding: a cheap guess of the next few tokens, which the
// target model then checks in one batch (SequenceDecoder::verify). A Drafter
// makes the guesses; what it guesses never changes the output, only how many
// tokens one step through the stages yields: the target samples every token
// as it would without speculation, and a guess counts only where it equals
// that sample.
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "model/batch.h"
#include "tokenizer/tokenizer.h"

namespace shoal {

enum class SpecType { None, Ngram, Draft, Mtp };

// llama-server's flags: -md, --draft-max, --draft-min, --draft-p-min, --spec-type.
struct SpeculativeOptions {
  SpecType type = SpecType::None;  // Draft when draft_model is set; Mtp: the model's own nextn block
  std::string draft_model;         // -md: a GGUF sharing the target's vocabulary
  int draft_max = 16;              // most tokens guessed per step
  int draft_min = 0;               // fewer guessed than this: none are verified
  // The draft model stops guessing where its top token is less likely than
  // this (llama-server's default since 2026 is 0 too: a wrong guess here
  // costs little, as the draft window shrinks to what was right).
  float draft_p_min = 0.0f;
};

// "none", "ngram", "draft" or "mtp" (llama-server's "ngram-simple", "draft-simple", "draft-mtp")
// -> the type; throws shoal::Error otherwise.
SpecType parse_spec_type(const std::string& name);
const char* spec_type_name(SpecType type);

// One sequence's request for a guess: every token it holds (prompt and
// generated, the last one not yet fed), and at most `max` tokens to guess.
struct DraftJob {
  int seq = 0;
  std::span<const TokenId> history;
  int max = 0;            // at most this many tokens
  int min = 0;            // fewer than this: no guess (--draft-min)
  float p_min = 0.0f;     // a draft model stops below this probability (--draft-p-min)
  std::vector<TokenId>* out = nullptr;  // cleared, then the guess
};

// A draft's guess from one row of its logits: the most likely token (ties:
// the lower id), and whether the draft gives it at least p_min.
std::pair<int, bool> best_token(const float* logits, int n_vocab, float p_min);

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Fills each job's out; a guess shorter than its job's min is dropped.
  // Jobs of one call belong to different sequences. A drafter that fails
  // is logged and leaves every guess empty: the step decodes as usual.
  void propose(std::span<DraftJob> jobs) noexcept;
  virtual std::string describe() const = 0;
  // A drafter that reads the target's hidden state (the MTP block) asks
  // for every row of every forward (Batch::all_rows) and is shown them
  // after it (see: the batch and its rows after the output norm). One that
  // fails there is logged and guesses nothing until it sees a sequence afresh.
  virtual bool reads_hidden_rows() const { return false; }
  void see(const Batch& batch, const float* normed_rows) noexcept;

 protected:
  virtual void guess(std::span<DraftJob> jobs) = 0;
  virtual void observe(const Batch& /*batch*/, const float* /*normed_rows*/) {}
  // After a failure in observe(): the sequences it held are unknown.
  virtual void forget_all() noexcept {}
};

}  // namespace shoal
