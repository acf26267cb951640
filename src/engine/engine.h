#pragma once
// A loaded model ready to run on this machine: the mapped GGUF, its config
// and weights, tokenizer and chat template, the thread pool, the CPU backend
// and a pipeline of local stages.
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "backend/device_choice.h"
#include "engine/drafter.h"
#include "engine/pipeline.h"
#include "engine/pooling.h"
#include "engine/rank_head.h"
#include "engine/stage_supervisor.h"
#include "gguf/reader.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/weights.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/thread_pool.h"

namespace shoal {

class Engine;

// The context size when -c is not given: the training context, at most 4096.
int default_context_size(const ModelConfig& config);

// Builds the stages that run the layers. The default puts every layer in one
// LocalStage on the CPU backend; the cluster's builder spreads them over
// local and remote stages (cluster/cluster_stages.h).
using StageBuilder = std::function<std::vector<std::unique_ptr<Stage>>(Engine& engine)>;

struct EngineOptions {
  std::string model_path;
  int threads = 0;      // 0: physical cores
  int n_ctx = 0;        // 0: min(training context, 4096)
  int n_seq = 1;        // sequence slots (parallel requests)
  int n_batch = 256;    // most tokens in one forward
  int n_ubatch = 64;    // a prompt crosses a cluster's stages in micro-batches of this many (-ub); 0: whole
  std::string chat_template;  // a format name that overrides the model's template
  std::string chat_template_file;  // a Jinja template file that replaces the model's
  bool reasoning = true;      // thinking models think (off: an empty thinking block)
  KvTypes kv_types;           // the KV cache's element types (-ctk / -ctv)
  std::string device = "cpu"; // where this machine's layers run: cpu, vulkan, vulkan:N (--device)
  int gpu_layers = -1;        // layers on the GPU device, the last ones (-ngl); -1: all of them
  SpeculativeOptions speculative;  // -md, --spec-type, --draft-max, ...
};

// A guess and the token before it when speculating on a model with a
// recurrent state (its stages keep that many rows of a step to take a wrong
// guess back: RecurrentState), else 0.
int rewind_rows_for(const ModelConfig& config, const SpeculativeOptions& spec);

class Engine {
 public:
  // shared_pool: run on that pool instead of one of its own (a draft model
  // beside its target: they take turns).
  explicit Engine(const EngineOptions& options, const StageBuilder& build_stages = {},
                  ThreadPool* shared_pool = nullptr);
  ~Engine();

  // Layers [begin, end) on this machine: one LocalStage, or two when -ngl
  // puts the later layers on the GPU and the earlier ones on the CPU.
  std::vector<std::unique_ptr<Stage>> make_local_stages(int begin, int end);
  // One LocalStage for layers [begin, end) on the CPU backend.
  std::unique_ptr<Stage> make_local_stage(int begin, int end);
  const EngineOptions& options() const { return options_; }
  const ModelWeights& weights() const { return weights_; }
  CpuBackend& cpu_backend() { return *backend_; }
  // The GPU backend when --device names one that is here; null otherwise.
  Backend* gpu_backend() { return gpu_backend_.get(); }
  // Where the embedding and the output head run: the GPU backend if there is one.
  Backend& head_backend() { return gpu_backend_ ? *gpu_backend_ : static_cast<Backend&>(*backend_); }
  // The first layer on the GPU (n_layer when none is).
  int gpu_begin() const { return gpu_begin_; }
  ThreadPool& pool() { return *pool_; }
  // What guesses tokens for speculative decoding; null without it.
  Drafter* drafter() { return drafter_.get(); }

  const ModelConfig& config() const { return config_; }
  const gguf::File& file() const { return *file_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ChatTemplate& chat_template() const { return chat_template_; }
  // How embeddings pool: the GGUF's {arch}.pooling_type (1 mean, 2 cls,
  // 3 last), or the last token for a causal LM without one. Throws
  // shoal::Error for a type Shoal does not pool (rank).
  Pooling pooling() const;
  // A reranker's ranking head (engine/rank_head.h), read on first use: null
  // for a model without one; throws shoal::Error for a rank model whose
  // head is not read.
  const RankHead* rank_head() const;
  Pipeline& pipeline() { return *pipeline_; }
  const Pipeline& pipeline() const { return *pipeline_; }
  // The cluster's supervisor, if the stages have one (set by the builder).
  void set_supervisor(std::shared_ptr<StageSupervisor> s) { supervisor_ = std::move(s); }
  StageSupervisor* supervisor() const { return supervisor_.get(); }
  // Recovery, the one path serve, run and chat take. A stage failed
  // (`cause`; null: the cluster's membership changed): the supervisor
  // re-plans over what is there, the pipeline gets the new stages and
  // replays into them the positions each sequence keeps; a stage lost
  // during the replay starts it over, a few times at most. Returns the
  // tokens replayed; nullopt without a supervisor. Throws (StagesUnavailable,
  // or the planner's error) when what is left cannot hold the model.
  std::optional<int> rebuild_stages(const std::exception* cause, const Pipeline::KeepPositions& keep);
  static constexpr int kReplayAttempts = 8;
  int n_ctx() const { return n_ctx_; }
  int n_batch() const { return n_batch_; }
  // How many rows of a sequence's step a stage of a hybrid model keeps to
  // take a wrong guess back (RecurrentState): rewind_rows_for, below.
  int rewind_rows() const;
  int threads() const { return pool_->size(); }

 private:
  EngineOptions options_;
  std::unique_ptr<gguf::File> file_;
  ModelConfig config_;
  ModelWeights weights_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ChatTemplate chat_template_ = ChatTemplate::detect("");
  void load_chat_template(const EngineOptions& options);
  int n_ctx_ = 0;
  int n_batch_ = 0;
  std::unique_ptr<ThreadPool> own_pool_;
  ThreadPool* pool_ = nullptr;
  std::unique_ptr<CpuBackend> backend_;      // layers on the CPU, and the head without a GPU
  std::unique_ptr<Backend> gpu_backend_;     // layers from gpu_begin_ on, with --device vulkan
  int gpu_begin_ = 0;
  std::unique_ptr<Pipeline> pipeline_;
  std::shared_ptr<StageSupervisor> supervisor_;
  std::unique_ptr<Drafter> drafter_;
  mutable std::once_flag rank_head_read_;
  mutable std::unique_ptr<RankHead> rank_head_;
  void check_speculative();
  void make_drafter();
};

}  // namespace shoal
