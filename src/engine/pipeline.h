#pragma once
// embed → Stage 0 → Stage 1 → … → norm + output head → logits.
// The primary owns the embedding and the head, which run on its head
// backend (the GPU when --device names one, else the CPU); stages own their
// layers, on whatever backend or machine they live. Activations cross
// between stages in host memory. A last stage that holds the head too (a
// tensor group, Stage::runs_head) runs it instead, but for embeddings
// (which pool the normed rows) and steps whose logits would be too many to
// send (kMaxStageLogitsBytes): the primary keeps the head's weights for those.
#include <atomic>
#include <climits>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "engine/prompt_stages.h"
#include "engine/stage.h"
#include "model/config.h"
#include "model/weights.h"

namespace shoal {

// A stage as the monitoring side sees it, copied under the pipeline's lock.
struct StageSnapshot {
  int layer_begin = 0;
  int layer_end = 0;
  std::vector<StageDevice> devices;
  double seconds = 0.0;  // in this stage's forward since it was built (a pipelined
                         // worker's: send to answer, overlapping the others)
  // Of which single-token steps (decode of one sequence): what the plan's
  // per-stage prediction is about.
  double decode_seconds = 0.0;
  uint64_t decode_steps = 0;
};

class Pipeline {
 public:
  static constexpr size_t kMaxStages = 64;
  // Logits a stage returns in one step at most (a FORWARD_RESULT); more
  // rows than this (teacher forcing a long text) go through the primary's head.
  static constexpr size_t kMaxStageLogitsBytes = 64u << 20;

  // micro_batch: a batch of at least twice this many tokens goes through
  // stages that compute elsewhere as a wavefront of micro-batches of this
  // size, so that every machine works at once (0: never).
  Pipeline(const ModelConfig& config, const ModelWeights& weights, Backend& head_backend,
           std::vector<std::unique_ptr<Stage>> stages, int max_tokens, int micro_batch = 0);

  // Runs a batch through every stage. Returns the logits of the rows marked
  // in batch.logits, in batch order: [batch.n_logits()][n_vocab]. Valid
  // until the next call.
  // With keep_normed, normed() then holds the same rows after the output
  // norm ([batch.n_logits()][n_embd]): what embeddings pool.
  const float* forward(const Batch& batch, bool keep_normed = false);
  const float* normed() const { return normed_.data(); }
  // After a batch with all_rows: every row after the output norm, in batch
  // order ([batch.size()][n_embd]), what the MTP draft reads.
  const float* normed_rows() const { return normed_rows_.data(); }

  // A new set of stages (after a re-plan); the old ones are destroyed, and
  // with them any prompt stages (set_prompt_stages gives the new ones).
  void replace_stages(std::vector<std::unique_ptr<Stage>> stages);
  // Prompts on stages of their own (engine/prompt_stages.h), covering every
  // layer; none: prompts run where the tokens do. A prompt stage that fails
  // is dropped: the sequences it held are forwarded again into the decode
  // stages, and the run goes on there (a warning says so).
  void set_prompt_stages(std::vector<std::unique_ptr<Stage>> stages);
  bool has_prompt_stages() const { return prompt_ != nullptr; }
  // What the moves from the prompt stages came to since they were set
  // (any thread), and where the prompt stages are (none: empty).
  PromptStages::Moves cache_moves() const;
  std::vector<StageDevice> prompt_devices() const;
  // How many of its first positions a sequence keeps through a re-plan
  // (0: none; INT_MAX: all it holds).
  using KeepPositions = std::function<int(int seq)>;
  // Into stages that hold nothing (just replaced): each sequence's first
  // keep(seq) tokens, forwarded again from position 0 (the same bits: batch
  // composition never changes them); the rest is forgotten. Returns the
  // tokens forwarded; throws what forward() throws.
  int replay(const KeepPositions& keep);

  // Cuts the sequence to its first n_pos positions, here and in every stage.
  void truncate_sequence(int seq, int n_pos);
  // Cuts only the record of what the sequence holds (held()): the stages
  // keep the rows past n_pos until the sequence's next write overwrites
  // them (a write ends a sequence where it lands: KvCache::admit). For a
  // speculative guess that was wrong, without a message to any worker; a
  // replay after a lost worker forwards only the verified tokens.
  void forget_after(int seq, int n_pos);
  // The tokens whose KV the sequence holds, by position: recorded as each
  // forward() completes its stages and cut by truncate_sequence, so this is
  // the one record of what the stages hold (prefix reuse and replay read
  // it). A position never forwarded reads kUnknownToken.
  std::span<const int32_t> held(int seq) const;
  static constexpr int32_t kUnknownToken = -1;

  int max_tokens() const { return max_tokens_; }
  // How far a sequence may be cut back (KvCache::max_rollback for the
  // engine's context and batch); set by the Engine.
  int max_rollback() const { return max_rollback_; }
  void set_max_rollback(int n) { max_rollback_ = n; }
  // Any thread: the stages and their time, consistent with each other.
  std::vector<StageSnapshot> snapshot() const;
  // Starts the stage times afresh (a benchmark's measured run after its warm-up).
  void clear_stage_times();
  const ModelConfig& config() const { return config_; }
  // Engine thread only (the stages change when the cluster re-plans).
  const std::vector<std::unique_ptr<Stage>>& stages() const { return stages_; }

 private:
  const ModelConfig& config_;
  const ModelWeights& weights_;
  Backend& head_;
  std::vector<std::unique_ptr<Stage>> stages_;
  std::unique_ptr<PromptStages> prompt_;
  // The stages this step runs on: stages_, or the prompt stages'.
  const std::vector<std::unique_ptr<Stage>>* running_ = &stages_;
  int max_tokens_;
  int micro_batch_;
  int max_rollback_ = INT_MAX;
  std::vector<std::vector<int32_t>> held_;  // per sequence: see held()
  void record(const Batch& batch);
  // The prompt stages failed (`why`): dropped, and what they held forwarded again into stages_.
  void lose_prompt_stages(const std::exception& why);
  // The tokens the record holds for `seq`, forwarded again from position 0; returns how many.
  int forward_again(int seq);
  // forward() on *running_.
  const float* forward_on_stages(const Batch& batch, bool keep_normed);
  // forward() of a batch whose rows on_prompt marks run on the prompt stages, the others on stages_.
  const float* forward_split(const Batch& batch, const std::vector<uint8_t>& on_prompt, bool keep_normed);
  // The batch embedded into hidden_, as the stages take it.
  void embed_rows(const Batch& batch);
  // The head over hidden_ after the stages: the logits (and normed rows) forward() returns.
  const float* run_head_on_rows(const Batch& batch, bool keep_normed);
  // The stages over the batch, one after another, or as a wavefront.
  const float* forward_on_device(const Batch& batch, bool keep_normed);
  void embed(const Batch& batch, DevicePtr rows);  // inside a step on the head's backend
  // The embedded rows as the stages take them: with each row's per-layer
  // inputs beside it (gemma4 E2B/E4B), or `rows` itself. Inside the step.
  DevicePtr travelling_rows(const Batch& batch, DevicePtr rows);
  DevicePtr logits_buffer(int m);                   // room for m rows of logits
  void run_head(DevicePtr rows, DevicePtr logits, int m, bool keep_normed);
  // A batch with all_rows, its n rows on the head's device: all normed and
  // kept, then those with logits to the front and through the head.
  void run_head_all_rows(const Batch& batch, DevicePtr rows, DevicePtr logits, int m, bool keep_normed);
  // logits: where the last stage leaves the logits when it runs the head (else nullptr).
  void run_stages(const Batch& batch, float* hidden, float* logits);
  void run_pipelined(const Batch& batch, float* hidden, float* logits);
  void add_stage_time(size_t stage, double seconds, bool decode);
  std::vector<Batch> micro_;  // reused: the micro-batches of a pipelined batch
  // Reused by forward_split: each row's side, and each side's rows and their hidden rows.
  std::vector<uint8_t> on_prompt_;
  std::vector<std::vector<int>> split_rows_;
  std::vector<std::vector<float>> split_hidden_;
  std::vector<float> hidden_;             // the stages' rows: [max_tokens][activation_width]
  // Per-layer inputs on the head's device: the tokens' rows, the inputs,
  // the rows with them ([max_tokens][side_width], twice; [max_tokens][activation_width]).
  std::unique_ptr<Buffer> layer_token_rows_, layer_inputs_, travel_rows_;
  std::vector<float> logits_;             // [rows with logits][n_vocab]
  std::vector<float> normed_;             // [rows with logits][n_embd], when forward keeps them
  std::vector<float> normed_rows_;        // [batch rows][n_embd], after a batch with all_rows
  std::unique_ptr<Buffer> head_rows_;     // on the head's device: embedded rows, then the rows for logits
  std::unique_ptr<Buffer> head_logits_;   // on the head's device; grows with the rows that want logits
  // Per stage, written by the engine thread only: all steps, single-token steps, their count.
  std::unique_ptr<std::atomic<double>[]> stage_seconds_, decode_seconds_;
  std::unique_ptr<std::atomic<uint64_t>[]> decode_steps_;
  mutable std::mutex stages_mutex_;  // replace_stages vs readers on other threads
};

}  // namespace shoal
