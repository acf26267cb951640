#pragma once
// A generated token's log-probability and its most likely alternatives, from
// the logits the sampler saw (log-softmax of the model's logits, before
// penalties and temperature: the model's distribution, as OpenAI and
// llama-server report it).
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace shoal {

struct TokenLogprob {
  TokenId token = 0;
  float logprob = 0;
  std::vector<std::pair<TokenId, float>> top;  // most likely first; ties: lower id first
};

// n_top alternatives (0: none). Accumulates in double, so the value does not
// depend on the thread count or the batch that produced the logits.
TokenLogprob token_logprob(const float* logits, int n_vocab, TokenId chosen, int n_top);

}  // namespace shoal
