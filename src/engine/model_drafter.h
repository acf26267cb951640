#pragma once
// A draft model (-md): a second, smaller GGUF with the target's vocabulary,
// run on the primary. Each sequence slot of the target has one in the
// draft's own pipeline; a guess first feeds what the target accepted since
// the last one (the draft's KV of its rejected guesses is overwritten), then
// takes the draft's most likely token, one step per token and one batch for
// every sequence at once, until draft_max tokens or a token the draft itself
// gives less than draft_p_min.
#include <memory>

#include "engine/drafter.h"
#include "model/batch.h"

namespace shoal {

class Engine;
class ThreadPool;

class ModelDrafter : public Drafter {
 public:
  // Loads the draft for `target` (same context, slots and batch), sharing
  // its thread pool. Throws shoal::Error when the vocabularies differ (with
  // the first difference) or the draft's cache cannot be cut back.
  ModelDrafter(const SpeculativeOptions& options, const Engine& target, ThreadPool& pool);
  ~ModelDrafter() override;
  std::string describe() const override;

 protected:
  void guess(std::span<DraftJob> jobs) override;

 private:
  struct Guess;  // one job's progress within propose()
  // One forward of the draft over batch_, then each job with a row of
  // logits takes its next guess (or stops).
  void forward_and_pick(std::span<Guess> guesses);
  SpeculativeOptions options_;
  std::unique_ptr<Engine> draft_;
  int target_vocab_;
  Batch batch_;  // reused
  std::vector<Guess> guesses_;
};

// Throws shoal::Error naming the first difference that makes the draft's
// tokens mean something else to the target.
void check_same_vocabulary(const Tokenizer& target, const Tokenizer& draft);

}  // namespace shoal
