#pragma once
// The recurrent memory of a range of layers: for each Gated DeltaNet layer
// (qwen35), per sequence slot, the convolution's last inputs and each value
// head's state (Backend's RecurrentLayer). Beside the KV cache and owned by
// the same stage; unlike it, a fixed size per sequence whatever its length.
//
// Nothing here resets a sequence: a row at position 0 starts its sequence
// from zero state (Backend::delta_net). A state cannot be cut back, so a
// prefix is reused only when the new prompt extends all that a slot holds.
//
// One exception, for speculative decoding: with rewind_rows > 0, a step
// that gives a sequence 2..rewind_rows rows in consecutive positions (a
// verified guess) is kept, per DeltaNet layer, as the sequence's state
// before the step and the step's inputs to the recurrence (the projected
// q/k/v, alpha and beta of those rows). Taking the step back to any of its
// positions is then the saved state and the recurrence run again over the
// kept rows before that position: the same kernel over the same inputs in
// the same order, so the bits of a run that never guessed (docs/design.md).
// Only a sequence's last step is kept; its next step replaces it.
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/batch.h"
#include "model/config.h"

namespace shoal {

class RecurrentState {
 public:
  // Layers [begin, end) of the model, n_seq sequence slots; rewind_rows:
  // how many rows of a sequence's step it keeps to take the step back (0: none).
  RecurrentState(Backend& backend, const ModelConfig& config, int begin, int end, int n_seq, int rewind_rows = 0);
  static size_t bytes_for(const ModelConfig& config, int begin, int end, int n_seq, int rewind_rows = 0);
  size_t bytes() const { return bytes_; }
  // The memory of the range's layer `index` (a DeltaNet layer).
  RecurrentLayer layer(int index) const;

  // Before a step's layers run: which sequences' part of it is kept (those
  // it gives 2..rewind_rows rows at consecutive positions); the others'
  // earlier steps can no longer be taken back.
  void begin_step(const Batch& batch);
  // A DeltaNet layer's step, before the recurrence runs: keeps the kept
  // sequences' state and the rows' inputs ([n][conv_width], [n][n_v_heads] twice).
  void keep(Backend& backend, int index, DevicePtr mixed, DevicePtr alpha, DevicePtr beta) const;

  // How sequence `seq` is taken back to its first n_pos positions: its
  // last step began at `first` (<= n_pos); `rows` of its kept rows (those
  // before n_pos) run again after the state is restored. nullopt: that step
  // was not kept, or began after n_pos.
  struct Rewind {
    int first = 0;
    int rows = 0;
  };
  std::optional<Rewind> rewind_for(int seq, int n_pos) const;
  // Layer `index`'s part of a rewind: restores seq's state before its last
  // step and copies the kept rows' inputs into mixed, alpha, beta (the
  // caller runs the recurrence over them).
  void restore(Backend& backend, int index, int seq, int rows, DevicePtr mixed, DevicePtr alpha, DevicePtr beta) const;
  // The step is taken back: it can be no more.
  void forget(int seq) { kept_.at(seq).rows = 0; }

  // A sequence's state of layer `index` as bytes (its convolution's inputs,
  // then its heads' states; empty for an attention layer), and back into a
  // slot (the slot's last step can then not be taken back), to move it to
  // a stage on another device. write_state throws on a size that does not match.
  std::vector<uint8_t> read_state(Backend& backend, int index, int seq) const;
  void write_state(Backend& backend, int index, int seq, std::span<const uint8_t> bytes);

 private:
  struct Layer {
    std::unique_ptr<Buffer> conv, ssm;  // null for an attention layer
    // With rewind_rows: each slot's state before its last kept step, and
    // that step's inputs ([n_seq][rewind_rows] rows each).
    std::unique_ptr<Buffer> conv_before, ssm_before, mixed, alpha, beta;
  };
  // A sequence's last step, as kept: its first position, its rows (0: not
  // kept), and which rows of the step they were.
  struct Kept {
    int first = 0;
    int rows = 0;
    std::vector<int> batch_rows;
  };
  size_t conv_seq_bytes_, ssm_seq_bytes_, bytes_ = 0;
  int64_t conv_width_, n_v_heads_;
  int rewind_rows_;
  std::vector<Layer> layers_;
  std::vector<Kept> kept_;                      // per sequence slot
  std::vector<int> step_kept_;                  // the sequences this step keeps
  std::vector<int> step_seqs_;                  // the sequences in this step (reused)
  static size_t rewind_bytes(const ModelConfig& config, int n_seq, int rewind_rows);
};

}  // namespace shoal
