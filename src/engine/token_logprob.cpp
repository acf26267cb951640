#include "engine/token_logprob.h"

#include <algorithm>
#include <cmath>

namespace shoal {

TokenLogprob token_logprob(const float* logits, int n_vocab, TokenId chosen, int n_top) {
  float max = logits[0];
  for (int i = 1; i < n_vocab; ++i) max = std::max(max, logits[i]);
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  const double log_z = max + std::log(sum);
  auto logprob = [&](TokenId id) { return static_cast<float>(logits[id] - log_z); };
  TokenLogprob out;
  out.token = chosen;
  out.logprob = logprob(chosen);
  n_top = std::clamp(n_top, 0, n_vocab);
  if (n_top > 0) {
    std::vector<TokenId> ids(static_cast<size_t>(n_vocab));
    for (int i = 0; i < n_vocab; ++i) ids[i] = i;
    std::partial_sort(ids.begin(), ids.begin() + n_top, ids.end(), [&](TokenId a, TokenId b) {
      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    });
    for (int k = 0; k < n_top; ++k) out.top.emplace_back(ids[k], logprob(ids[k]));
  }
  return out;
}

}  // namespace shoal
