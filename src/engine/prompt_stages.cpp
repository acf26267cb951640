#include "engine/prompt_stages.h"

#include <algorithm>
#include <chrono>

#include "util/log.h"

namespace shoal {

namespace {
Stage& holder(const std::vector<std::unique_ptr<Stage>>& stages, int layer) {
  for (const auto& s : stages)
    if (layer >= s->layer_begin() && layer < s->layer_end()) return *s;
  fail("internal: no stage holds layer {}", layer);
}
}  // namespace

PromptStages::PromptStages(std::vector<std::unique_ptr<Stage>> stages, int n_layer)
    : stages_(std::move(stages)), n_layer_(n_layer) {
  int next = 0;
  for (const auto& s : stages_) {
    if (s->layer_begin() != next) fail("internal: prompt stages do not cover the layers at layer {}", next);
    next = s->layer_end();
  }
  if (next != n_layer) fail("internal: prompt stages cover {} of {} layers", next, n_layer);
}

PromptStages::Where& PromptStages::where(int seq) {
  if (seq < 0) fail("sequence id {} is negative", seq);
  if (static_cast<size_t>(seq) >= where_.size()) where_.resize(static_cast<size_t>(seq) + 1, Where::Nowhere);
  return where_[static_cast<size_t>(seq)];
}

int PromptStages::route(const Batch& batch, const std::vector<std::unique_ptr<Stage>>& decode,
                        std::vector<uint8_t>& on_prompt) {
  // A sequence's first row here decides, and leaves where it went for its later rows.
  on_prompt.assign(static_cast<size_t>(batch.size()), 0);
  int here = 0;
  for (int t = 0; t < batch.size(); ++t) {
    Where& w = where(batch.seq_ids[t]);
    if (batch.positions[t] == 0 || w == Where::Prompt) {
      w = Where::Prompt;
      on_prompt[t] = 1;
      ++here;
    } else {
      if (w == Where::Done) move(batch.seq_ids[t], decode);
      w = Where::Decode;
    }
  }
  return here;
}

void PromptStages::move(int seq, const std::vector<std::unique_ptr<Stage>>& decode) {
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t bytes = 0, kept = 0;
  for (int layer = 0; layer < n_layer_; ++layer) {
    Stage &from = holder(stages_, layer), &to = holder(decode, layer);
    LayerCache cache;
    try {
      // A machine that holds the layer in both keeps its rows: copied there, not sent.
      if (from.copy_cache_to(to, seq, layer)) {
        ++kept;
        continue;
      }
      cache = from.read_cache(seq, layer);
    } catch (const std::exception& e) {
      throw PromptStagesFailed(fmt::format("moving sequence {}'s cache of layer {} from the prompt stage {}: {}", seq,
                                           layer, from.describe(), e.what()));
    }
    bytes += cache.bytes.size();
    to.write_cache(seq, layer, cache);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  {
    std::lock_guard<std::mutex> lock(moves_mutex_);
    ++moves_.sequences;
    moves_.bytes += bytes;
    moves_.kept_layers += kept;
    moves_.seconds += seconds;
  }
  spdlog::debug("sequence {}: its prompt's cache ({:.1f} MiB) moved to the decode stages in {:.3f} s", seq,
                bytes / 1048576.0, seconds);
}

void PromptStages::ran(const Batch& batch) {
  for (int t = 0; t < batch.size(); ++t)
    if (t < static_cast<int>(batch.logits.size()) && batch.logits[t]) where(batch.seq_ids[t]) = Where::Done;
}

void PromptStages::truncate(int seq, int n_pos) {
  Where& w = where(seq);
  if (w == Where::Prompt || w == Where::Done) {
    try {
      for (const auto& s : stages_) s->truncate_sequence(seq, n_pos);
    } catch (const std::exception& e) {
      throw PromptStagesFailed(fmt::format("cutting sequence {} on the prompt stages: {}", seq, e.what()));
    }
  }
  if (n_pos == 0) w = Where::Nowhere;
}

std::vector<int> PromptStages::held_here() const {
  std::vector<int> out;
  for (size_t seq = 0; seq < where_.size(); ++seq)
    if (where_[seq] == Where::Prompt || where_[seq] == Where::Done) out.push_back(static_cast<int>(seq));
  return out;
}

}  // namespace shoal
