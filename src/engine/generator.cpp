#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "engine/stop_matcher.h"
#include "tokenizer/utf8_stream.h"
#include "util/error.h"

namespace shoal {
namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

Generator::Generator(Pipeline& pipeline, const Tokenizer& tokenizer, int n_ctx, int seq)
    : pipeline_(pipeline), tokenizer_(tokenizer), n_ctx_(n_ctx), seq_(seq) {}

const float* Generator::feed(std::span<const TokenId> tokens, int start_pos) {
  if (tokens.empty()) fail("nothing to feed");
  const float* logits = nullptr;
  const size_t chunk = static_cast<size_t>(pipeline_.max_tokens());
  for (size_t i = 0; i < tokens.size(); i += chunk) {
    const size_t n = std::min(chunk, tokens.size() - i);
    batch_.clear();
    for (size_t j = 0; j < n; ++j)
      batch_.add(tokens[i + j], start_pos + static_cast<int>(i + j), seq_, i + j + 1 == tokens.size());
    logits = pipeline_.forward(batch_);
  }
  cached_.resize(static_cast<size_t>(start_pos));
  cached_.insert(cached_.end(), tokens.begin(), tokens.end());
  return logits;
}

GenerationResult Generator::generate(std::span<const TokenId> prompt, const GenerationOptions& options,
                                     const std::function<bool(const std::string&)>& on_text) {
  GenerationResult result;
  result.n_prompt = static_cast<int>(prompt.size());
  if (prompt.empty()) fail("the prompt is empty (no tokens)");
  if (static_cast<int>(prompt.size()) >= n_ctx_)
    fail("the prompt has {} tokens, the context only {}", prompt.size(), n_ctx_);

  // Reuse the cached prefix, but always feed at least one token: its logits
  // start the generation.
  size_t reuse = 0;
  while (reuse < cached_.size() && reuse + 1 < prompt.size() && cached_[reuse] == prompt[reuse]) ++reuse;
  pipeline_.truncate_sequence(seq_, static_cast<int>(reuse));
  cached_.resize(reuse);
  result.n_reused = static_cast<int>(reuse);
  auto t0 = std::chrono::steady_clock::now();
  const float* logits = feed(prompt.subspan(reuse), static_cast<int>(reuse));
  result.prompt_seconds = seconds_since(t0);

  Sampler sampler(options.sampling, pipeline_.config().n_vocab);
  StopMatcher stops(options.stop);
  Utf8Stream utf8;
  std::vector<TokenId> history(prompt.begin(), prompt.end());
  history.reserve(prompt.size() + std::max(0, options.max_tokens));
  int pos = static_cast<int>(prompt.size());
  result.finish_reason = "length";
  auto t1 = std::chrono::steady_clock::now();
  bool keep_going = true;
  while (keep_going) {
    if (options.max_tokens >= 0 && static_cast<int>(result.tokens.size()) >= options.max_tokens) break;
    if (options.on_logits) options.on_logits(logits, pipeline_.config().n_vocab);
    const TokenId token = sampler.sample(logits, history);
    if (!options.ignore_eos && tokenizer_.is_end_of_generation(token)) {
      result.finish_reason = "stop";
      break;
    }
    result.tokens.push_back(token);
    history.push_back(token);
    std::string text = stops.push(utf8.push(tokenizer_.token_to_piece(token)));
    if (!text.empty() && on_text) keep_going = on_text(text);
    if (stops.stopped()) {
      result.finish_reason = "stop";
      break;
    }
    if (pos >= n_ctx_) break;  // context full
    TokenId next[1] = {token};
    logits = feed(next, pos++);
  }
  std::string tail = stops.push(utf8.flush());
  tail += stops.flush();
  if (!tail.empty() && on_text && keep_going) on_text(tail);
  result.generation_seconds = seconds_since(t1);
  return result;
}

}  // namespace shoal
