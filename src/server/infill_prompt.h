#pragma once
// llama-server's POST /infill: editor completion (llama.vscode, llama.vim,
// Continue's autocomplete) sends the text before and after the cursor, and
// perhaps other files, and the model writes the middle with its own
// fill-in-the-middle tokens. The prompt is laid out token for token as
// llama-server lays it out (the repository-level pattern):
//   [FIM_REP]myproject\n [FIM_SEP]name\n text … [FIM_SEP]filename\n
//   [BOS] [FIM_PRE]prefix prompt [FIM_SUF]suffix [FIM_MID]
// keeping the prefix's end and the suffix's start to fit a 2048-token
// batch (3:1), and as much of the other files as the context leaves.
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace shoal::server {

struct InfillInput {
  std::string prefix, suffix;  // input_prefix, input_suffix
  std::vector<std::pair<std::string, std::string>> extra;  // input_extra: (filename, text)
  std::string prompt;          // written after the prefix (what the user typed)
};

// Reads input_prefix, input_suffix (required), input_extra and prompt, and
// removes them from `body`: the rest is an ordinary /completion request.
// Throws ApiError 400 naming the field.
InfillInput take_infill_input(nlohmann::json& body);

// Throws ApiError 400 when the model has no prefix, suffix or middle token.
// n_predict: the server's default limit (-1: none), which llama-server
// leaves room for when it sizes the other files' share.
std::vector<TokenId> infill_prompt(const Tokenizer& tokenizer, const InfillInput& input, int n_predict, int n_ctx);

}  // namespace shoal::server
