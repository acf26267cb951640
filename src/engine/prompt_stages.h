#pragma once
// Prompts on stages of their own (--prefill-on): a machine that computes
// faster takes the prompts, the decode stages the tokens. A sequence's rows
// run on the prompt stages until its prompt is done there (a row of it
// wanted logits); before its next row runs on the decode stages, its cache
// moves there layer by layer (Stage::read_cache, write_cache): the rows as
// they were computed, so decoding gives the bits of a run on one placement.
// A batch runs on the prompt stages only when every sequence in it is in
// its prompt there: a new request's prompt batched beside others' tokens
// runs where the tokens do (its cache, if any, moved first).
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
  // True: `batch` runs on the prompt stages. False: on `decode`, after each
  // of its sequences whose cache is on the prompt stages moved there (a
  // prompt stage that fails meanwhile throws PromptStagesFailed).
  bool route(const Batch& batch, const std::vector<std::unique_ptr<Stage>>& decode);
  // After `batch` ran on the prompt stages: a sequence with a row that
  // wanted logits has its prompt done.
  void ran(const Batch& batch);
  // A sequence cut back (0: it starts afresh, wherever it goes next).
  void truncate(int seq, int n_pos);
  // The sequences whose cache is on the prompt stages.
  std::vector<int> held_here() const;

  struct Moves {
    uint64_t sequences = 0;
    uint64_t bytes = 0;
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
  std::vector<int> seqs_;     // a batch's sequences (reused)
  mutable std::mutex moves_mutex_;
  Moves moves_;
};

}  // namespace shoal
