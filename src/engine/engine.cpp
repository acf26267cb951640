#include "engine/engine.h"

#include <algorithm>
#include <climits>

#include "engine/local_stage.h"
#include "engine/model_drafter.h"
#include "engine/mtp_drafter.h"
#include "engine/ngram_drafter.h"
#include "model/kv_cache.h"
#include "util/error.h"
#include "util/log.h"
#include "util/text_file.h"

namespace shoal {

int default_context_size(const ModelConfig& config) { return std::min(config.n_ctx_train, 4096); }

Engine::Engine(const EngineOptions& options, const StageBuilder& build_stages, ThreadPool* shared_pool)
    : options_(options) {
  if (options.n_ubatch < 0) fail("-ub must not be negative, got {}", options.n_ubatch);
  file_ = gguf::File::open(options.model_path);
  config_ = ModelConfig::from_gguf(*file_);
  weights_ = bind_weights(*file_, config_);
  tokenizer_ = Tokenizer::from_gguf(*file_);
  if (tokenizer_->n_vocab() > config_.n_vocab)
    fail("{}: tokenizer has {} tokens but the embedding only {} rows", options.model_path, tokenizer_->n_vocab(),
         config_.n_vocab);
  if (!options.chat_template.empty()) {
    chat_template_ = ChatTemplate::detect(options.chat_template);
    if (chat_template_.fell_back() || chat_template_.name() != options.chat_template)
      fail("unknown chat template '{}' (known: {})", options.chat_template, ChatTemplate::known_names());
  } else {
    load_chat_template(options);
  }

  check_kv_types(options.kv_types, config_);  // before any stage, local or remote, is made
  n_ctx_ = options.n_ctx > 0 ? options.n_ctx : default_context_size(config_);
  if (n_ctx_ < 8 || n_ctx_ > (1 << 20)) fail("context size {} is out of range", n_ctx_);
  if (options.n_seq < 1 || options.n_seq > 256) fail("{} parallel sequences is out of range 1..256", options.n_seq);
  n_batch_ = std::clamp(options.n_batch, 1, 4096);
  if (shared_pool) {
    pool_ = shared_pool;
  } else {
    own_pool_ = std::make_unique<ThreadPool>(options.threads > 0 ? options.threads : ThreadPool::default_threads());
    pool_ = own_pool_.get();
  }
  backend_ = std::make_unique<CpuBackend>(*pool_, n_batch_, config_.max_activation_width());
  const DeviceChoice device = resolve_device(parse_device(options.device));
  gpu_begin_ = config_.n_layer;
  if (device.vulkan && options.gpu_layers != 0) {
    gpu_backend_ = make_layer_backend(device, *pool_, n_batch_, config_.max_activation_width());
    const int on_gpu = options.gpu_layers < 0 ? config_.n_layer : std::min(options.gpu_layers, config_.n_layer);
    gpu_begin_ = config_.n_layer - on_gpu;  // the last layers, as llama.cpp's -ngl
  } else if (options.gpu_layers > 0 && !device.vulkan && options.device == "cpu") {
    spdlog::warn("-ngl {} without --device vulkan: every layer runs on the CPU", options.gpu_layers);
  }
  check_speculative();
  // The head (output norm and vocabulary matmul) runs where the GPU layers
  // do, so a GPU primary keeps its model on the GPU; layers are prepared
  // as stages take them.
  prepare_weights(head_backend(), weights_, config_, BindRange{0, 0, true});

  std::vector<std::unique_ptr<Stage>> stages;
  if (build_stages)
    stages = build_stages(*this);
  else
    stages = make_local_stages(0, config_.n_layer);
  pipeline_ = std::make_unique<Pipeline>(config_, weights_, head_backend(), std::move(stages), n_batch_,
                                         std::min(options.n_ubatch, n_batch_));
  pipeline_->set_max_rollback(KvCache::max_rollback(config_, n_ctx_, n_batch_));
  if (supervisor_) pipeline_->set_prompt_stages(supervisor_->take_prompt_stages());

  spdlog::info("model: {} ({}), {} layers, embedding {}, heads {}/{}, vocab {}", config_.name, config_.arch,
               config_.n_layer, config_.n_embd, config_.n_head, config_.n_head_kv, config_.n_vocab);
  spdlog::info("context {} tokens x {} sequences, batch {}, {} threads, chat template {}", n_ctx_, options.n_seq,
               n_batch_, pool_->size(), chat_template_.name());
  for (const auto& s : pipeline_->stages()) spdlog::info("stage: {}", s->describe());
  make_drafter();
}

Engine::~Engine() = default;

// Before any stage is made (a worker loads nothing for a run that cannot start).
void Engine::check_speculative() {
  SpeculativeOptions& spec = options_.speculative;
  if (!spec.draft_model.empty() && spec.type == SpecType::None) spec.type = SpecType::Draft;
  if (spec.type == SpecType::None) return;
  if (spec.draft_max < 1 || spec.draft_max > 64) fail("--draft-max {} is out of range 1..64", spec.draft_max);
  if (spec.draft_min < 0 || spec.draft_min > spec.draft_max)
    fail("--draft-min {} is out of range 0..{} (--draft-max)", spec.draft_min, spec.draft_max);
  if (!(spec.draft_p_min >= 0 && spec.draft_p_min <= 1)) fail("--draft-p-min {} is out of range 0..1", spec.draft_p_min);
  if (spec.type == SpecType::Draft && spec.draft_model.empty()) fail("--spec-type draft needs a draft model (-md FILE)");
  if (spec.type == SpecType::Ngram && !spec.draft_model.empty())
    fail("--spec-type ngram guesses without a draft model: give -md or --spec-type ngram, not both");
  if (spec.type == SpecType::Mtp && !spec.draft_model.empty())
    fail("--spec-type mtp drafts with the model's own layers: give -md or --spec-type mtp, not both");
  if (spec.type == SpecType::Mtp && config_.n_nextn < 1)
    fail("--spec-type mtp drafts with the model's own multi-token-prediction layers, and {} has none (no "
         "{}.nextn_predict_layers: converted with --no-mtp?); use --spec-type ngram or a draft model (-md)",
         options_.model_path, config_.arch);
  // A verified guess is kept and a wrong one overwritten: the target's
  // cache must go back by a whole guess (a recurrent state goes back within
  // the step that guessed, which its stages keep: rewind_rows).
  const int rollback = KvCache::max_rollback(config_, n_ctx_, n_batch_);
  if (!config_.has_recurrent_layers() && rollback < spec.draft_max + 1)
    fail("speculative decoding needs a cache that can be cut back by {} tokens, and {}'s {} cannot", spec.draft_max + 1,
         config_.arch, rollback == 0 ? "recurrent state" : "sliding window");
  if (spec.draft_max + 1 > n_batch_) fail("--draft-max {} needs a batch of {} tokens (-b)", spec.draft_max, spec.draft_max + 1);
}

void Engine::make_drafter() {
  const SpeculativeOptions& spec = options_.speculative;
  if (spec.type == SpecType::None) return;
  // A slot's record stops short of its stages' rows by a wrong guess at
  // most, so prefix reuse keeps that much of the window in hand.
  if (pipeline_->max_rollback() != INT_MAX)
    pipeline_->set_max_rollback(std::max(0, pipeline_->max_rollback() - spec.draft_max - 1));
  if (spec.type == SpecType::Draft) {
    drafter_ = std::make_unique<ModelDrafter>(spec, *this, *pool_);
  } else if (spec.type == SpecType::Mtp) {
    drafter_ = std::make_unique<MtpDrafter>(spec, *this);
  } else {
    drafter_ = std::make_unique<NgramDrafter>();
  }
  spdlog::info("speculative decoding: {}", drafter_->describe());
}

int rewind_rows_for(const ModelConfig& config, const SpeculativeOptions& spec) {
  const bool guessing = spec.type != SpecType::None || !spec.draft_model.empty();
  return config.has_recurrent_layers() && guessing ? spec.draft_max + 1 : 0;
}

int Engine::rewind_rows() const { return rewind_rows_for(config_, options_.speculative); }

std::vector<std::unique_ptr<Stage>> Engine::make_local_stages(int begin, int end) {
  std::vector<std::unique_ptr<Stage>> stages;
  const int split = std::clamp(gpu_begin_, begin, end);
  if (split > begin) stages.push_back(make_local_stage(begin, split));
  if (split < end) {
    prepare_weights(*gpu_backend_, weights_, config_, BindRange{split, end, false});
    stages.push_back(std::make_unique<LocalStage>(*gpu_backend_, config_, weights_, split, end, options_.n_seq, n_ctx_,
                                                  n_batch_, options_.kv_types, 0, rewind_rows()));
  }
  return stages;
}

std::unique_ptr<Stage> Engine::make_local_stage(int begin, int end) {
  prepare_weights(*backend_, weights_, config_, BindRange{begin, end, false});
  return std::make_unique<LocalStage>(*backend_, config_, weights_, begin, end, options_.n_seq, n_ctx_, n_batch_,
                                      options_.kv_types, 0, rewind_rows());
}

std::optional<int> Engine::rebuild_stages(const std::exception* cause, const Pipeline::KeepPositions& keep) {
  if (!supervisor_) return std::nullopt;
  auto use = [&](std::vector<std::unique_ptr<Stage>> stages) {
    pipeline_->replace_stages(std::move(stages));
    pipeline_->set_prompt_stages(supervisor_->take_prompt_stages());
  };
  use(supervisor_->rebuild(*this, cause));
  for (int attempt = 1;; ++attempt) {
    try {
      return pipeline_->replay(keep);
    } catch (const std::exception& e) {
      // A worker lost during the replay: plan around it too and start over.
      if (attempt == kReplayAttempts)
        throw StagesUnavailable(fmt::format("the cluster kept failing while it was rebuilt: {}", e.what()));
      use(supervisor_->rebuild(*this, &e));
    }
  }
}


const RankHead* Engine::rank_head() const {
  std::call_once(rank_head_read_, [this] { rank_head_ = RankHead::from_gguf(*file_, config_); });
  return rank_head_.get();
}

Pooling Engine::pooling() const {
  const int64_t type = file_->get_int(config_.arch + ".pooling_type", 0);
  switch (type) {
    case 0: return Pooling::Last;  // none given: a causal LM's last token
    case 1: return Pooling::Mean;
    case 2: return Pooling::Cls;
    case 3: return Pooling::Last;
    default: fail("the model's pooling type {} (rank) gives scores, not embeddings", type);
  }
}

// The model's template (or --chat-template-file) renders through the Jinja
// engine; a model template that does not parse falls back to the built-in
// formatter of its family, a file given by hand is an error.
void Engine::load_chat_template(const EngineOptions& options) {
  std::string source;
  if (!options.chat_template_file.empty()) {
    source = read_text_file(options.chat_template_file, "the chat template");
  } else {
    source = file_->get_string("tokenizer.chat_template", "");
  }
  chat_template_ = ChatTemplate::detect(source);
  if (source.empty()) {
    spdlog::warn("the model has no chat template (a base model?): chat uses ChatML");
    return;
  }
  const TokenId bos = tokenizer_->bos(), eos = tokenizer_->eos();
  try {
    chat_template_.use_jinja(std::make_shared<JinjaChat>(source, bos >= 0 ? tokenizer_->token_text(bos) : "",
                                                         eos >= 0 ? tokenizer_->token_text(eos) : ""),
                             tokenizer_->add_bos());
  } catch (const Error& e) {
    if (!options.chat_template_file.empty()) fail("{}: {}", options.chat_template_file, e.what());
    if (chat_template_.unknown())
      spdlog::warn("the model's chat template does not parse ({}): chat requests will be refused until "
                   "--chat-template names its format (one of: {})", e.what(), ChatTemplate::known_names());
    else
      spdlog::warn("the model's chat template does not parse ({}): chat uses the built-in '{}' format",
                   e.what(), chat_template_.name());
  }
}
}  // namespace shoal
