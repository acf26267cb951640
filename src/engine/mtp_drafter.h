#pragma once
// The model's own multi-token-prediction block as the draft (--spec-type
// mtp, llama.cpp's draft-mtp). Qwen3.5/3.6, GLM-4.5+ and DeepSeek V3 files
// carry, after their layers, one more decoder layer (nextn) that reads a
// token's embedding beside the model's hidden state at the position before
// it (each normed, side by side, projected to one row) and guesses the token
// after it through the model's own output head. It needs no second model
// and shares the vocabulary by construction.
//
// It runs on the primary, beside the output head it shares: the last
// layer's rows come there for the head anyway (Batch::all_rows asks for
// every row, not only those with logits). Its KV cache follows the
// target's: after each forward (observe) every row's token goes through the
// block with the hidden state of the row before it; a guess then starts
// from the sequence's last token and the hidden state that chose it, and
// goes on from the block's own hidden state, one token a step, as
// llama.cpp's draft-mtp does.
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "engine/drafter.h"
#include "engine/local_stage.h"
#include "model/config.h"
#include "model/weights.h"

namespace shoal {

class Engine;

class MtpDrafter : public Drafter {
 public:
  // Binds the first nextn block of the target's file on its head backend.
  // The Engine refuses a file without one first (Engine::check_speculative).
  MtpDrafter(const SpeculativeOptions& options, Engine& target);
  ~MtpDrafter() override;
  std::string describe() const override;
  bool reads_hidden_rows() const override { return true; }

  // Tests: one step of the block over `batch`, `hidden` the target's normed
  // row before each ([batch.size()][n_embd]); returns the logits of the rows
  // that want them ([n_logits][n_vocab]; the block's own normed rows in
  // step_rows()).
  const float* step(const Batch& batch, const float* hidden);
  const float* step_rows() const { return out_rows_.data(); }

 protected:
  void guess(std::span<DraftJob> jobs) override;
  void observe(const Batch& batch, const float* normed_rows) override;
  void forget_all() noexcept override;

 private:
  // What the target last showed of one sequence: its rows' tokens and
  // hidden states from position `begin` on.
  static constexpr size_t kKeptRows = 65;  // --draft-max's most, and the token before
  struct Seen {
    int begin = 0;
    std::vector<int32_t> tokens;
    std::vector<float> rows;  // [tokens.size()][n_embd]
  };
  // The target's hidden state at `pos` of a sequence whose tokens are
  // `history` (zeros before position 0); null when it was not seen.
  const float* hidden_at(int seq, int pos, std::span<const TokenId> history) const;

  SpeculativeOptions options_;
  Backend& backend_;
  const ModelWeights& target_weights_;
  ModelConfig config_;    // the target's, with the block as layer n_layer
  ModelWeights weights_;  // the block's layer and its nextn tensors
  Matrix head_norm_;      // nextn.shared_head_norm, or the model's output norm
  Matrix own_embd_, own_head_;  // the block's own embedding and head, where the file has them
  std::unique_ptr<LocalStage> stage_;
  int max_tokens_;
  int n_ctx_;
  std::unique_ptr<Buffer> buffer_;  // embeddings, hidden rows, their pairs, the block's rows
  std::unique_ptr<Buffer> logits_buffer_;  // grows with the rows that want logits
  DevicePtr embd_, hidden_, pair_, rows_;
  std::vector<float> logits_host_, out_rows_, zeros_;
  std::vector<Seen> seen_;  // per sequence slot
  Batch batch_;             // reused
  std::vector<float> batch_hidden_;
};

}  // namespace shoal
