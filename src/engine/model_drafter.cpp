#include "engine/model_drafter.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "engine/engine.h"
#include "engine/sequence_decoder.h"
#include "util/error.h"
#include "util/log.h"

namespace shoal {

void check_same_vocabulary(const Tokenizer& target, const Tokenizer& draft) {
  if (target.n_vocab() != draft.n_vocab())
    fail("the draft model's vocabulary has {} tokens, the target's {}: a draft must share the target's vocabulary",
         draft.n_vocab(), target.n_vocab());
  for (TokenId id = 0; id < target.n_vocab(); ++id)
    if (target.token_text(id) != draft.token_text(id))
      fail("the draft model's token {} is '{}', the target's '{}': a draft must share the target's vocabulary", id,
           draft.token_text(id), target.token_text(id));
  if (target.bos() != draft.bos() || target.eos() != draft.eos() || target.add_bos() != draft.add_bos())
    fail("the draft model's BOS/EOS tokens differ from the target's ({}/{} against {}/{})", draft.bos(), draft.eos(),
         target.bos(), target.eos());
}

struct ModelDrafter::Guess {
  DraftJob* job = nullptr;
  int next_pos = 0;  // where the next fed token goes
  bool done = false;
};

ModelDrafter::ModelDrafter(const SpeculativeOptions& options, const Engine& target, ThreadPool& pool)
    : options_(options), target_vocab_(target.config().n_vocab) {
  EngineOptions eo;
  eo.model_path = options.draft_model;
  eo.n_ctx = target.n_ctx();
  eo.n_seq = target.options().n_seq;
  eo.n_batch = target.n_batch();
  eo.n_ubatch = 0;
  eo.chat_template = "chatml";  // never used: the target's template renders every chat
  draft_ = std::make_unique<Engine>(eo, StageBuilder{}, &pool);
  check_same_vocabulary(target.tokenizer(), draft_->tokenizer());
  if (draft_->pipeline().max_rollback() < options.draft_max + 1)
    fail("the draft model ({}) keeps a state that cannot be cut back by {} tokens", draft_->config().arch,
         options.draft_max + 1);
}

ModelDrafter::~ModelDrafter() = default;

std::string ModelDrafter::describe() const {
  return fmt::format("draft model {} ({}, {} layers), up to {} tokens, p >= {}", options_.draft_model,
                     draft_->config().name, draft_->config().n_layer, options_.draft_max, options_.draft_p_min);
}

void ModelDrafter::guess(std::span<DraftJob> jobs) {
  Pipeline& pipeline = draft_->pipeline();
  const int budget = pipeline.max_tokens();
  std::vector<Guess>& guesses = guesses_;  // reused: no allocation per step
  guesses.assign(jobs.size(), Guess{});
  for (size_t j = 0; j < jobs.size(); ++j) guesses[j].job = &jobs[j];  // before any forward reads them
  // First what each sequence took since its last guess (usually one or two
  // tokens; a new prompt in chunks), the last of it with logits.
  batch_.clear();
  for (size_t j = 0; j < jobs.size(); ++j) {
    DraftJob& job = jobs[j];
    Guess& g = guesses[j];
    g.done = job.max <= 0 || job.history.empty();
    if (g.done) continue;
    const size_t reuse = reusable_prefix(pipeline.held(job.seq), job.history, pipeline.max_rollback());
    size_t at = reuse;
    const size_t end = job.history.size();
    // A stretch that does not fit the batch goes alone, in chunks.
    while (static_cast<int>(end - at) > budget - batch_.size()) {
      if (batch_.size() > 0) {
        forward_and_pick(guesses);
        batch_.clear();
        continue;
      }
      for (int k = 0; k < budget && at + 1 < end; ++k, ++at)
        batch_.add(job.history[at], static_cast<int>(at), job.seq, false);
      pipeline.forward(batch_);
      batch_.clear();
    }
    for (; at < end; ++at) batch_.add(job.history[at], static_cast<int>(at), job.seq, at + 1 == end);
    g.next_pos = static_cast<int>(end);
  }
  // Then one token a step for every sequence still guessing.
  while (batch_.size() > 0) {
    forward_and_pick(guesses);
    batch_.clear();
    for (Guess& g : guesses) {
      if (g.done) continue;
      batch_.add(g.job->out->back(), g.next_pos - 1, g.job->seq, true);
    }
  }
}

void ModelDrafter::forward_and_pick(std::span<Guess> guesses) {
  const float* logits = draft_->pipeline().forward(batch_);
  const int n_vocab = draft_->config().n_vocab;
  // Rows with logits come back in batch order; each belongs to the guess
  // whose sequence and position it holds.
  int row = 0;
  for (int t = 0; t < batch_.size(); ++t) {
    if (!batch_.logits[static_cast<size_t>(t)]) continue;
    const float* l = logits + static_cast<size_t>(row++) * n_vocab;
    for (Guess& g : guesses) {
      if (g.done || g.job->seq != batch_.seq_ids[static_cast<size_t>(t)]) continue;
      const auto [best, sure] = best_token(l, n_vocab, g.job->p_min);
      if (!sure || best >= target_vocab_) {
        g.done = true;
        break;
      }
      g.job->out->push_back(best);
      ++g.next_pos;
      g.done = static_cast<int>(g.job->out->size()) >= g.job->max || g.next_pos >= draft_->n_ctx();
      break;
    }
  }
}

}  // namespace shoal
