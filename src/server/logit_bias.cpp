// A request's logit_bias resolved against the model's vocabulary: ids
// checked, texts tokenized (openai_types.h). Apart from the request
// parsers, which need no model.
#include <fmt/format.h>

#include "server/openai_types.h"

namespace shoal::server {

void resolve_logit_bias(GenerationRequest& g, const Tokenizer& tokenizer) {
  auto& out = g.options.sampling.logit_bias;
  const int n_vocab = tokenizer.n_vocab();
  for (const GenerationRequest::Bias& b : g.logit_bias) {
    if (b.text.empty()) {
      if (b.token >= n_vocab)
        throw ApiError(400, fmt::format("Invalid 'logit_bias': token {} is outside the vocabulary of {} tokens.", b.token,
                                        n_vocab),
                       "invalid_request_error", "logit_bias", "invalid_value");
      out.emplace_back(static_cast<int32_t>(b.token), b.bias);
      continue;
    }
    // As llama-server: the text's tokens, without BOS or special tokens.
    for (TokenId t : tokenizer.encode(b.text, false, false)) out.emplace_back(t, b.bias);
  }
}

}  // namespace shoal::server
