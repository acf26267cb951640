#pragma once
// Prompts on stages of their own (--prefill-on): a machine that computes
// faster takes the prompts, the decode stages the tokens. A sequence's rows
// run on the prompt stages until its prompt is done there (a row of it
// wanted logits); before its next row runs on the decode stages, its cache
// moves there layer by layer (Stage::read_cache, write_cache): the rows as
// they were computed, so decoding gives the bits of a run on one placement.
// In a batch with both, each sequence's rows go where it is: a new
// request's prompt on the prompt stages while the others' tokens run on
// the decode stages (Pipeline runs the two at once).
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/stage.h"
#include "model/batch.h"
#include "util/error.h"

namespace shoal {

// A prompt stage failed (its worker lost): the caller runs on without them.
class PromptStagesFailed : public Error {
 public:
  using Error::Error;
};

class PromptStages {
 public:
  PromptStages(std::vector<std::unique_ptr<Stage>> stages, int n_layer);

  const std::vector<std::unique_ptr<Stage>>& stages() const { return stages_; }
  // Which rows of `batch` run on the prompt stages (on_prompt[t] = 1): those
  // of a sequence that starts afresh (its first row here at position 0) or
  // is in its prompt there. The others run on `decode`, a sequence whose
  // cache is on the prompt stages moved there first (a prompt stage that
  // fails meanwhile throws PromptStagesFailed). Returns how many rows run
  // on the prompt stages.
  int route(const Batch& batch, const std::vector<std::unique_ptr<Stage>>& decode, std::vector<uint8_t>& on_prompt);
  // After `batch` ran on the prompt stages: a sequence with a row that
  // wanted logits has its prompt done.
  void ran(const Batch& batch);
  // A sequence cut back (0: it starts afresh, wherever it goes next).
  void truncate(int seq, int n_pos);
  // The sequences whose cache is on the prompt stages.
  std::vector<int> held_here() const;

  struct Moves {
    uint64_t sequences = 0;
    uint64_t bytes = 0;        // that crossed the network
    uint64_t kept_layers = 0;  // copied on the machine that holds them in both
    double seconds = 0;
  };
  Moves moves() const {  // any thread
    std::lock_guard<std::mutex> lock(moves_mutex_);
    return moves_;
  }

 private:
  enum class Where : uint8_t { Nowhere, Prompt, Done, Decode };
  Where& where(int seq);
  void move(int seq, const std::vector<std::unique_ptr<Stage>>& decode);
  std::vector<std::unique_ptr<Stage>> stages_;
  int n_layer_;
  std::vector<Where> where_;  // per sequence slot
  mutable std::mutex moves_mutex_;
  Moves moves_;
};

}  // namespace shoal
