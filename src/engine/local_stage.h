#pragma once
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "engine/stage.h"
#include "model/kv_cache.h"
#include "model/transformer_layer.h"

namespace shoal {

// Layers [begin, end) of a model on a local backend, with their sequence
// memory (a KV cache; a recurrent state for DeltaNet layers).
class LocalStage : public Stage {
 public:
  // kv_heads: as KvCache's (0: all of each layer's KV heads); rewind_rows:
  // how many rows of a sequence's step its recurrent state keeps to take
  // the step back (speculative decoding on a hybrid model; RecurrentState).
  LocalStage(Backend& backend, const ModelConfig& config, const ModelWeights& weights, int begin, int end, int n_seq,
             int n_ctx, int max_tokens, KvTypes kv_types, int kv_heads = 0, int rewind_rows = 0);

  int layer_begin() const override { return begin_; }
  int layer_end() const override { return end_; }
  std::string describe() const override;
  std::vector<StageDevice> devices() const override;
  void forward(const Batch& batch, float* hidden) override;
  // A hybrid model's sequence goes back within its last step only.
  void truncate_sequence(int seq, int n_pos) override;
  LayerCache read_cache(int seq, int layer) override;
  void write_cache(int seq, int layer, const LayerCache& cache) override;
  bool runs_on(const Backend& backend) const override { return &backend == &backend_; }
  void forward_on_device(const Batch& batch, DevicePtr rows) override;

  size_t kv_bytes() const { return kv_.bytes() + state_.bytes(); }

 private:
  Backend& backend_;
  const ModelConfig& config_;
  const ModelWeights& weights_;
  int begin_, end_;
  int max_tokens_;
  int kv_heads_;               // a tensor group member's share of the KV heads (0: all)
  bool ends_model_;            // holds the model's last layer
  std::vector<int32_t> rows_out_;  // this step's rows that want logits, for the last layer
  KvCache kv_;
  RecurrentState state_;
  LayerScratch scratch_;

  void run_layers(const Batch& batch);  // on scratch_.x, inside a step
  // Travelling rows [n][activation_width] into scratch_.x (and the per-layer
  // inputs into scratch_.side), and the residual stream back into them.
  void take_rows(DevicePtr rows, int n);
  void give_rows(DevicePtr rows, int n);
  // Before a step: a sequence that the batch takes up before its end goes
  // back there first (a wrong guess overwritten); its recurrent state notes the step.
  // True when a sequence went back (a step of its own ran on the backend).
  bool admit(const Batch& batch);
  void rewind(int seq, int n_pos);
};

}  // namespace shoal
