#pragma once
// The recurrent memory of a range of layers: for each Gated DeltaNet layer
// (qwen35), per sequence slot, the convolution's last inputs and each value
// head's state (Backend's RecurrentLayer). Beside the KV cache and owned by
// the same stage; unlike it, a fixed size per sequence whatever its length.
//
// Nothing here resets a sequence: a row at position 0 starts its sequence
// from zero state (Backend::delta_net), and a sequence is never cut back to
// anything but 0 or its whole length (KvCache::max_rollback is 0 for such
// models), so a prefix is reused only when the new prompt extends all that
// a slot holds; otherwise the prompt is computed again.
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"

namespace shoal {

class RecurrentState {
 public:
  // Layers [begin, end) of the model, n_seq sequence slots.
  RecurrentState(Backend& backend, const ModelConfig& config, int begin, int end, int n_seq);
  static size_t bytes_for(const ModelConfig& config, int begin, int end, int n_seq);
  size_t bytes() const { return bytes_; }
  // The memory of the range's layer `index` (a DeltaNet layer).
  RecurrentLayer layer(int index) const;

 private:
  struct Layer {
    std::unique_ptr<Buffer> conv, ssm;  // null for an attention layer
  };
  size_t conv_seq_bytes_, ssm_seq_bytes_, bytes_ = 0;
  std::vector<Layer> layers_;
};

}  // namespace shoal
